"""CLI: python -m acgan.compare --steps N | --minutes M [--policies float32,mixed_float16] [--batch 64]
[--seeds 3] [--judges 3] [--cas] [--parallel 2]
[--output_dir DIR [--resume]] ...

From Python: acgan.compare(steps=N, policies=("float32", "mixed_float16"), ...) returns an acgan.api.Report
of compare.json."""
import functools

from absl import flags

from acgan import api, cli
from acgan.quality.comparison import CompareSettings  # no framework loads: Keras loads after the training


@functools.cache
def define_flags():
    """The command's flags; cli.run_main defines them before parsing (importing the module defines none)."""
    flags.DEFINE_list("policies", ["float32", "mixed_float16"], "Dtype policies to compare, comma-separated.")
    flags.DEFINE_integer("steps", None, "Train every policy this many steps (equal steps).")
    flags.DEFINE_float("minutes", None, "Train every policy this long (equal wall-clock time).")
    flags.DEFINE_integer("batch", 64, "Global batch size.")
    cli.define_data_flags()
    cli.define_model_flags()
    cli.define_loss_flag()
    cli.define_ema_decay_flag()
    cli.define_ema_flag()
    cli.define_backend_flag()
    cli.define_seed_flag("Seed shared by every policy's run and by the evaluation.")
    cli.define_price_flag()
    cli.define_labels_flag()
    flags.DEFINE_integer("num_samples", 10_000, "Generated samples judged per run (real test images: as many, or all).")
    flags.DEFINE_integer("judges", 1, "Judge every run with this many judges (seeds 0, 1, ...) and show how the "
                         "accuracy and its change move with the judge; the verdict stays judge 0's.")
    flags.DEFINE_integer("seeds", 1, "Train every policy at this many training seeds (--seed, --seed + 1, ...) and "
                         "rule on the means; each seed's numbers stay on the page.")
    flags.DEFINE_bool("cas", False, "Also each run's classification accuracy score (acgan.evaluate --cas): shown on "
                      "the page, not part of the verdict.")
    flags.DEFINE_integer("parallel", 1, "Train this many runs at once (default: one after another, each alone on the "
                         "machine). Quality at equal --steps does not depend on the run beside it; times do.")
    flags.DEFINE_string("output_dir", None, "Folder for the runs and the page (default: a new folder under outputs/).")
    flags.DEFINE_bool("resume", False, "Go on with the comparison in --output_dir: runs finished there are judged as "
                      "they are, interrupted ones resume (at --steps), missing ones train (e.g. after Ctrl-C, or with "
                      "more --seeds); each must have been trained with this command's settings.")


FLAGS = flags.FLAGS


def main(argv):
    settings = cli.settings_from_flags(CompareSettings, policies=tuple(FLAGS.policies or ())).validate()
    out = api.compare_with(settings, command=cli.command_line()).folder
    print(f"wrote {out / 'compare.md'} and {out / 'compare.png'}")


if __name__ == "__main__":
    cli.run_main(main)
