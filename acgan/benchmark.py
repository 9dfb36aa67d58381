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
from acgan.config import Config


@functools.cache
def define_flags():
    """The command's flags; cli.run_main defines them before parsing (importing the module defines none)."""
    flags.DEFINE_list("backends", [backend.default()], "Keras backends to time: tensorflow, jax or tensorflow,jax "
                      "(default: the KERAS_BACKEND environment variable, else tensorflow).")
    flags.DEFINE_alias("backend", "backends")
    flags.DEFINE_list("policies", ["float32", "mixed_float16", "mixed_bfloat16"], "Dtype policies to time.")
    flags.DEFINE_list("batches", ["64", "256", "1024", "2048"], "Batch sizes to time.")
    flags.DEFINE_list("jit", ["on"], "XLA settings to time: on, off or on,off.")
    cli.define_data_flags(classes=False)
    flags.DEFINE_boolean("synthetic", False, "Time on random in-memory tensors (28x28x1, 10 classes) instead of "
                         "--dataset.")
    cli.define_setting_flags(Config, ["arch", "width"])  # --jit is a sweep dimension here
    flags.DEFINE_integer("steps", 20, "Steps per timing.")
    flags.DEFINE_integer("warmup", 3, "Steps after the compile step left out of the timing.")
    flags.DEFINE_integer("repeats", 3, "Timings per configuration (median, min and max reported).")
    cli.define_setting_flags(Config, ["seed"], helps={"seed": "Seed for the weights, the noise and the chosen images."})
    flags.DEFINE_string("device_name", None, "Name for this device in reports; also picks the price entry (e.g. T4).")
    cli.define_setting_flags(Config, ["price_per_hour"])
    flags.DEFINE_string("output_dir", None, "Output folder (default: outputs/benchmark-<timestamp>/).")
    cli.define_strategy_flags(exclude=("multi_worker",))  # each configuration is one process
    flags.DEFINE_boolean("overhead", True, "Also time the full training loop at one configuration (--no-overhead to "
                         "skip).")
    flags.DEFINE_integer("overhead_batch", 256, "Batch size of the trainer-overhead measurement.")
    flags.DEFINE_integer("log_every", None, "--log_every of the trainer-overhead run (default: --steps, one metrics "
                         "read, a device sync, per timed window; otherwise windows are --steps rounded up to a "
                         "multiple).")

    flags.DEFINE_string("profile", None, "A folder: also record a profiler trace of --profile_length more steps of "
                        "every configuration in a subfolder, with profile.md: where the device time went (summarized "
                        "in benchmark.md).")
    flags.DEFINE_integer("profile_length", 5, "Steps in each --profile trace (fewer for a quick look: an XLA-off "
                         "step on JAX runs thousands of traced ops).")
    flags.DEFINE_float("max_seconds", None, "Stop a configuration whose worker (start-up, compilation and timing) runs "
                       "longer than this, and report it as too_slow (default: no limit).")


FLAGS = flags.FLAGS


def settings_from_flags():
    return cli.settings_from_flags(
        SweepSettings, backends=parse_backends(FLAGS.backends), policies=tuple(dict.fromkeys(FLAGS.policies)),
        batches=parse_batches(FLAGS.batches), jits=parse_jit(FLAGS.jit)).validate()


def main(argv):
    result = api.benchmark_with(settings_from_flags(), FLAGS.output_dir, command=cli.command_line())
    print((result.folder / "benchmark.md").read_text())
    print(f"benchmark folder: {result.folder}  (report: {result.folder / 'benchmark.md'})")


if __name__ == "__main__":
    cli.run_main(main)
