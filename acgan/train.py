"""CLI: python -m acgan.train [--dataset doodles] [--policy float32] [--batch 64] ...

From Python: acgan.train(dataset="doodles", policy="float32", batch=64, ...) returns an acgan.api.Run."""

import functools
import sys

from absl import flags

from acgan import api, backend, cli
from acgan.config import Config
from acgan.errors import DIVERGED_STATUS
from acgan.training import jax_supervisor


@functools.cache
def define_flags():
    """The command's flags, one per Config field (cli.run_main defines them before parsing; importing the
    module defines none), and --config."""
    cli.define_setting_flags(Config, defaults={"backend": backend.default()})
    flags.DEFINE_string(
        "config",
        None,
        "Start from the settings in this file (a run's config.json, or one "
        "acgan.compare writes for each of its runs); the flags given beside it override them.",
    )


def main(argv):
    # the flags typed: a resumed run keeps the settings not typed (an empty --config: none)
    typed = cli.flag_arguments(api.train, typed_only=True)
    config = api.training_config(**dict(typed, config=flags.FLAGS.config or None))
    if jax_supervisor.needed(
        config
    ):  # JAX would abort this process for a lost coordinator: train in a child
        sys.exit(jax_supervisor.supervise(config))
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
