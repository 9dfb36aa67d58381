"""CLI: python -m acgan.benchmark [--backends tensorflow,jax] [--policies ...] [--batches 64,256,1024,2048]
[--jit on,off] [--synthetic] ...

This process never imports Keras: each configuration runs in a worker process on its own backend.
"""
from absl import flags

from acgan import backend, cli

flags.DEFINE_list("backends", [backend.default()], "Keras backends to time: tensorflow, jax or tensorflow,jax "
                  "(default: the KERAS_BACKEND environment variable, else tensorflow).")
flags.DEFINE_alias("backend", "backends")
flags.DEFINE_list("policies", ["float32", "mixed_float16", "mixed_bfloat16"], "Dtype policies to time.")
flags.DEFINE_list("batches", ["64", "256", "1024", "2048"], "Batch sizes to time.")
flags.DEFINE_list("jit", ["on"], "XLA settings to time: on, off or on,off.")
cli.define_data_flags(classes=False)
flags.DEFINE_boolean("synthetic", False, "Time on random in-memory tensors (28x28x1, 10 classes) instead of --dataset.")
cli.define_model_flags(jit=False)  # --jit is a sweep dimension here
flags.DEFINE_integer("steps", 20, "Steps per timing.")
flags.DEFINE_integer("warmup", 3, "Steps after the compile step left out of the timing.")
flags.DEFINE_integer("repeats", 3, "Timings per configuration (median, min and max reported).")
cli.define_seed_flag("Seed for the weights, the noise and the chosen images.")
flags.DEFINE_string("device_name", None, "Name for this device in reports; also picks the price entry (e.g. T4).")
cli.define_price_flag()
flags.DEFINE_string("output_dir", None, "Output folder (default: outputs/benchmark-<timestamp>/).")
cli.define_strategy_flags(exclude=("multi_worker",))  # each configuration is one process
flags.DEFINE_boolean("overhead", True, "Also time the full training loop at one configuration (--no-overhead to skip).")
flags.DEFINE_integer("overhead_batch", 256, "Batch size of the trainer-overhead measurement.")
flags.DEFINE_integer("log_every", None, "--log_every of the trainer-overhead run (default: --steps, one metrics "
                     "read, a device sync, per timed window; otherwise windows are --steps rounded up to a multiple).")

flags.DEFINE_string("profile", None, "A folder: also record a profiler trace of 5 more steps of every configuration "
                    "in a subfolder, with profile.md: where the device time went (summarized in benchmark.md).")
flags.DEFINE_float("max_seconds", None, "Stop a configuration whose worker (start-up, compilation and timing) runs "
                   "longer than this, and report it as too_slow (default: no limit).")

FLAGS = flags.FLAGS


def settings_from_flags():
    from acgan.measure.sweep import SweepSettings, parse_backends, parse_batches, parse_jit

    return cli.settings_from_flags(
        SweepSettings, backends=parse_backends(FLAGS.backends), policies=tuple(dict.fromkeys(FLAGS.policies)),
        batches=parse_batches(FLAGS.batches), jits=parse_jit(FLAGS.jit)).validate()


def main(argv):
    settings = settings_from_flags()
    if not settings.synthetic:
        from acgan import data

        data.validate_dataset_name(settings.dataset)
    from acgan.measure import sweep, tables  # no backend loads here: the workers load theirs

    output_dir, doc = sweep.run_sweep(settings, FLAGS.output_dir, command=cli.command_line())
    tables.write_outputs(doc, output_dir)
    print(tables.render_markdown(doc))
    print(f"benchmark folder: {output_dir}  (report: {output_dir / 'benchmark.md'})")


if __name__ == "__main__":
    cli.run_main(main)
