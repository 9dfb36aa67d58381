"""CLI: python -m acgan.benchmark [--backends tensorflow,jax] [--policies ...] [--batches 64,256,1024,2048]
[--jit on,off] [--synthetic] ...

This process never imports Keras: each configuration runs in a worker process on its own backend.
From Python: acgan.benchmark(backends=None, policies=..., batches=(64, 256, 1024, 2048), ...) returns an
acgan.api.Report of benchmark.json.
"""

import functools

from absl import flags

from acgan import api, backend, cli
from acgan.bench.sweep import SweepSettings, parse_backends, parse_batches, parse_jit
from acgan.config import STRATEGIES, setting_fields


@functools.cache
def define_flags():
    """The command's flags; cli.run_main defines them before parsing (importing the module defines none)."""
    flags.DEFINE_list(
        "backends",
        [backend.default()],
        "Keras backends to time: tensorflow, jax or tensorflow,jax "
        "(default: the KERAS_BACKEND environment variable, else tensorflow).",
    )
    flags.DEFINE_alias("backend", "backends")
    default = SweepSettings()
    flags.DEFINE_list("policies", list(default.policies), "Dtype policies to time.")
    flags.DEFINE_list("batches", [str(b) for b in default.batches], "Batch sizes to time.")
    flags.DEFINE_list(
        "jit",
        ["on" if jit else "off" for jit in default.jits],
        "XLA settings to time: on, off or on,off.",
    )
    # The rest, one per SweepSettings field; each configuration is one process, so no multi_worker.
    cli.define_setting_flags(
        SweepSettings,
        [f.name for f in setting_fields(SweepSettings) if f.name not in SWEPT],
        choices={"strategy": [s for s in STRATEGIES if s != "multi_worker"]},
    )
    flags.DEFINE_string(
        "output_dir", None, "Output folder (default: outputs/benchmark-<timestamp>/)."
    )


# The sweep's dimensions, defined above as list flags that settings_from_flags parses (--jit: jits).
SWEPT = ("backends", "policies", "batches", "jits")


FLAGS = flags.FLAGS


def main(argv):
    settings = cli.settings_from_flags(
        SweepSettings,
        backends=parse_backends(FLAGS.backends),
        policies=tuple(dict.fromkeys(FLAGS.policies)),
        batches=parse_batches(FLAGS.batches),
        jits=parse_jit(FLAGS.jit),
    ).validate()
    result = api.benchmark_with(settings, FLAGS.output_dir, command=cli.command_line())
    print((result.folder / "benchmark.md").read_text())
    print(f"benchmark folder: {result.folder}  (report: {result.folder / 'benchmark.md'})")


if __name__ == "__main__":
    cli.run_main(main)
