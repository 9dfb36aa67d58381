"""CLI: python -m acgan.generate --run DIR --per_class N --out FILE.png|FILE.npz

From Python: acgan.generate(run, per_class=10, out=None, ...) returns the samples as numpy arrays
(acgan.api.Samples), writing `out` only when given."""

import functools

from absl import flags

from acgan import api, cli
from acgan.config import Config


@functools.cache
def define_flags():
    """The command's flags; cli.run_main defines them before parsing (importing the module defines none)."""
    flags.DEFINE_integer("per_class", 10, "Samples per class.")
    flags.DEFINE_string(
        "out", None, "Output file: .png (a grid, one row per class) or .npz (images, labels)."
    )
    flags.DEFINE_integer("seed", 0, "Seed for the noise.")
    cli.define_setting_flags(Config, ["labels"])
    cli.define_run_flags()


def main(argv):
    # --out is required here: an empty name is refused with the call's message for a bad one.
    samples = api.generate(**dict(cli.flag_arguments(api.generate), out=flags.FLAGS.out or ""))
    print(f"wrote {samples.path}")


if __name__ == "__main__":
    cli.run_main(main)
