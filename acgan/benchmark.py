"""CLI: python -m acgan.benchmark [--backends tensorflow,jax] [--policies ...] [--batches 64,256,1024,2048]
[--jit on,off] [--synthetic] ...

This process never imports Keras: each configuration runs in a worker process on its own backend.
From Python: acgan.benchmark(backends=None, policies=..., batches=(64, 256, 1024, 2048), ...) returns an
acgan.api.Report of benchmark.json.
"""

import functools

from absl import flags

from acgan import api, backend, cli
from acgan.bench.sweep import SweepSettings
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


# The sweep's dimensions, defined above as list flags that acgan.benchmark parses (--jit: jits).
SWEPT = ("backends", "policies", "batches", "jits")


def main(argv):
    result = api.benchmark(**cli.flag_arguments(api.benchmark))
    print((result.folder / "benchmark.md").read_text())
    print(f"benchmark folder: {result.folder}  (report: {result.folder / 'benchmark.md'})")


if __name__ == "__main__":
    cli.run_main(main)
