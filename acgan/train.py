"""CLI: python -m acgan.train [--dataset doodles] [--policy float32] [--batch 64] ...

From Python: acgan.train(dataset="doodles", policy="float32", batch=64, ...) returns an acgan.api.Run."""
import functools
import sys

from absl import flags

from acgan import api, cli
from acgan.config import Config
from acgan.errors import DIVERGED_STATUS


@functools.cache
def define_flags():
    """The command's flags; cli.run_main defines them before parsing (importing the module defines none)."""
    cli.define_data_flags()
    flags.DEFINE_enum("policy", "float32", ["float32", "mixed_float16", "mixed_bfloat16"], "Keras dtype policy.")
    flags.DEFINE_integer("batch", 64, "Global batch size.")
    flags.DEFINE_integer("steps", None, "Train this many steps (default 1000 when no length is given).")
    flags.DEFINE_integer("epochs", None, "Train this many passes over the data.")
    flags.DEFINE_float("minutes", None, "Train for this much wall-clock time.")
    cli.define_model_flags()
    cli.define_loss_flag()
    cli.define_ema_decay_flag()
    cli.define_strategy_flags()
    cli.define_backend_flag()
    flags.DEFINE_boolean("sync_bn", True, "With several replicas, batch-norm statistics over the global batch.")
    cli.define_seed_flag()
    flags.DEFINE_integer("sample_every", 250, "Save a sample grid every N steps (and at the end).")
    cli.define_labels_flag()
    flags.DEFINE_integer("eval_every", None, "Judge sample quality every N steps (conditional accuracy, FID).")
    flags.DEFINE_integer("eval_samples", 1000, "Generated samples per evaluation during training.")
    flags.DEFINE_integer("checkpoint_every", 500, "Save a checkpoint every N steps.")
    flags.DEFINE_integer("keep_checkpoints", 3, "How many checkpoints to keep.")
    flags.DEFINE_integer("warmup_steps", 5, "Steps after compilation left out of the timing; as many more, run back "
                         "to back, time the bare step.")
    flags.DEFINE_integer("log_every", 25, "Read the metrics (TensorBoard, progress, divergence check) every N steps.")
    flags.DEFINE_string("output_dir", None, "The run's folder (default: a new folder under outputs/).")
    cli.define_price_flag()
    flags.DEFINE_boolean("resume", False, "Continue the run in --output_dir (default: the newest run under outputs/).")
    flags.DEFINE_integer("max_skipped_in_a_row", 20, "mixed_float16: stop when an optimizer skips more steps in a row.")
    flags.DEFINE_string("profile_steps", None, "A:B (e.g. 20:24): record a profiler trace of steps A to B in the run's "
                        "profile/ folder, with profile.md: where the device time went.")


FLAGS = flags.FLAGS


def config_from_flags():
    return cli.settings_from_flags(Config)


def _given_flags():
    names = {name for name in FLAGS if FLAGS[name].present}
    for name in ("jit", "sync_bn", "labels"):
        if "no" + name in names:
            names.add(name)
    return names


def main(argv):
    config = api.resolve_config(config_from_flags(), _given_flags())
    result = api.train_with(config, command=cli.command_line())
    if config.strategy == "multi_worker":
        print(f"weights fingerprint: {result.weights_fingerprint}")
    if result.chief:
        print(f"run folder: {result.folder}  (report: {result.folder / 'report.md'})")
    else:
        print(f"worker done; the chief writes the run folder {result.folder}")
    if result.status == "diverged":
        cli.fail(result.message, status=DIVERGED_STATUS)
    if result.status == "interrupted":
        sys.stderr.write(f"{result.message}; checkpoint and report saved, resume with --resume\n")
        sys.exit(128 + result.signal)


if __name__ == "__main__":
    cli.run_main(main)
