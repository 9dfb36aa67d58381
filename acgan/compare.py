"""CLI: python -m acgan.compare --steps N | --minutes M [--policies float32,mixed_float16] [--batch 64]
[--seeds 3] [--judges 3] [--cas] [--parallel 2]
[--output_dir DIR [--resume]] ...

From Python: acgan.compare(steps=N, policies=("float32", "mixed_float16"), ...) returns an acgan.api.Report
of compare.json."""

import functools

from acgan import api, backend, cli
from acgan.quality.comparison import (
    CompareSettings,  # no framework loads: Keras loads after the training
)


@functools.cache
def define_flags():
    """The command's flags, one per CompareSettings field (cli.run_main defines them before parsing; importing
    the module defines none)."""
    cli.define_setting_flags(CompareSettings, defaults={"backend": backend.default()})


def main(argv):
    out = api.compare(**cli.flag_arguments(api.compare)).folder
    print(f"wrote {out / 'compare.md'} and {out / 'compare.png'}")


if __name__ == "__main__":
    cli.run_main(main)
