"""CLI: python -m acgan.generate --run DIR --per_class N --out FILE.png|FILE.npz"""
from absl import flags

from acgan import cli

flags.DEFINE_string("run", None, "A run folder written by acgan.train.")
flags.DEFINE_integer("per_class", 10, "Samples per class.")
flags.DEFINE_string("out", None, "Output file: .png (a grid, one row per class) or .npz (images, labels).")
flags.DEFINE_integer("seed", 0, "Seed for the noise.")
cli.define_labels_flag()
cli.define_backend_flag(of_run=True)
FLAGS = flags.FLAGS


def main(argv):
    from pathlib import Path

    from acgan.errors import UserError

    if not FLAGS.run:
        raise UserError("--run is required: the folder of a training run")
    if not FLAGS.out or Path(FLAGS.out).suffix.lower() not in (".png", ".npz"):
        raise UserError("--out must name a .png or .npz file")
    if FLAGS.per_class <= 0:
        raise UserError(f"--per_class must be a positive integer, got {FLAGS.per_class}")
    from acgan import backend

    backend.use_for_run(FLAGS.backend, Path(FLAGS.run))
    from acgan.training import sampling

    path = sampling.generate_to_file(Path(FLAGS.run), FLAGS.per_class, Path(FLAGS.out), FLAGS.seed,
                                       labels=FLAGS.labels)
    print(f"wrote {path}")


if __name__ == "__main__":
    cli.run_main(main)
