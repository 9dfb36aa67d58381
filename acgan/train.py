"""CLI: python -m acgan.train [--dataset doodles] [--policy float32] [--batch 64] ..."""
from absl import flags

from acgan import cli

flags.DEFINE_string("dataset", "doodles", "doodles, quickdraw, cifar10, npz:PATH or folder:PATH.")
flags.DEFINE_list("classes", None, "Quick-Draw classes (default: airplane,apple,bee,bird,book,clock,cow,dog,eye,fish).")
flags.DEFINE_string("data_dir", "data", "Folder for downloads and caches.")
flags.DEFINE_integer("max_per_class", None, "Use at most this many images per class.")
flags.DEFINE_enum("policy", "float32", ["float32", "mixed_float16", "mixed_bfloat16"], "Keras dtype policy.")
flags.DEFINE_integer("batch", 64, "Global batch size.")
flags.DEFINE_float("width", 1.0, "Channel multiplier (channels stay multiples of 8).")
flags.DEFINE_integer("steps", None, "Train this many steps (default 1000 when no length is given).")
flags.DEFINE_integer("epochs", None, "Train this many passes over the data.")
flags.DEFINE_float("minutes", None, "Train for this much wall-clock time.")
flags.DEFINE_boolean("jit", True, "Compile the train step with XLA (--nojit or --no-jit to turn off).")
flags.DEFINE_integer("seed", 0, "Random seed for weights, noise, data order and grids.")
flags.DEFINE_integer("sample_every", 250, "Save a sample grid every N steps (0: only at the end).")
flags.DEFINE_integer("checkpoint_every", 500, "Save a checkpoint every N steps.")
flags.DEFINE_integer("keep_checkpoints", 3, "How many checkpoints to keep.")
flags.DEFINE_integer("warmup_steps", 5, "Steps after compilation left out of the timing.")
flags.DEFINE_string("output_dir", None, "The run's folder (default: a new folder under outputs/).")
flags.DEFINE_float("price_per_hour", None, "USD per hour of this machine, for the cost report.")

FLAGS = flags.FLAGS


def config_from_flags():
    from acgan.config import Config

    return Config(
        dataset=FLAGS.dataset,
        classes=tuple(FLAGS.classes) if FLAGS.classes else None,
        data_dir=FLAGS.data_dir,
        max_per_class=FLAGS.max_per_class,
        policy=FLAGS.policy,
        batch=FLAGS.batch,
        width=FLAGS.width,
        steps=FLAGS.steps,
        epochs=FLAGS.epochs,
        minutes=FLAGS.minutes,
        jit=FLAGS.jit,
        seed=FLAGS.seed,
        sample_every=FLAGS.sample_every,
        checkpoint_every=FLAGS.checkpoint_every,
        keep_checkpoints=FLAGS.keep_checkpoints,
        warmup_steps=FLAGS.warmup_steps,
        output_dir=FLAGS.output_dir,
        price_per_hour=FLAGS.price_per_hour,
    )


def main(argv):
    config = config_from_flags().validate()
    from acgan import data

    data.validate_dataset_name(config.dataset, classes=config.classes)
    from acgan import precision, trainer  # TensorFlow loads here, after the flags are known good.

    precision.set_policy(config.policy)
    run_dir = trainer.run(config, command=cli.command_line())
    print(f"run folder: {run_dir}  (report: {run_dir / 'report.md'})")


if __name__ == "__main__":
    cli.run_main(main)
