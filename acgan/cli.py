"""Shared CLI plumbing: absl flag parsing where every user error is one line and exit status 2."""
import os
import sys

from absl import app, flags, logging

from acgan.errors import UserError


def define_strategy_flags(exclude=()):
    """--strategy and --devices, as acgan.train and acgan.benchmark both take them."""
    from acgan.config import STRATEGIES

    flags.DEFINE_enum("strategy", "auto", [s for s in STRATEGIES if s not in exclude],
                      "tf.distribute strategy (auto: mirrored when more than one GPU is visible).")
    flags.DEFINE_list("devices", None, "Devices for --strategy mirrored, e.g. gpu:0,gpu:1 (cpu:0,cpu:1 splits the CPU).")


def fail(message, status=2):
    sys.stderr.write(f"error: {message}\n")
    sys.exit(status)


def _spell_negations(argv):
    """Accepts `--no-jit` for absl's `--nojit` (boolean flags only)."""
    out = []
    for arg in argv:
        name = arg[len("--no-"):]
        if arg.startswith("--no-") and name in flags.FLAGS and flags.FLAGS[name].boolean:
            arg = "--no" + name
        out.append(arg)
    return out


def _parse_flags(argv):
    try:
        rest = flags.FLAGS(_spell_negations(argv))
    except flags.Error as e:
        fail(str(e).splitlines()[0])
    if len(rest) > 1:
        fail(f"unexpected arguments: {' '.join(rest[1:])}")
    return rest


def command_line():
    """The command as typed, for reports."""
    argv = sys.argv
    name = os.path.basename(argv[0])
    if name == "__main__.py" or name.endswith(".py"):
        name = "python -m " + (sys.modules["__main__"].__spec__.name if sys.modules["__main__"].__spec__ else name)
    return " ".join([name] + argv[1:])


def run_main(main):
    """Runs `main(argv)` under absl; UserError becomes one line on stderr and exit status 2."""
    # Quieten TensorFlow's C++ start-up chatter unless the user asked for it.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    def guarded(argv):
        # absl's app.run logs INFO to stderr (TensorFlow's checkpoint chatter among it); keep warnings.
        logging.set_verbosity(logging.WARNING)
        try:
            main(argv)
        except UserError as e:
            fail(str(e))

    app.run(guarded, flags_parser=_parse_flags)
