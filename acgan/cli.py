"""Shared CLI plumbing: absl flag parsing where every user error is one line and exit status 2.

A command module (acgan/train.py, ...) defines its flags in define_flags(), which run_main calls, so
importing one defines nothing and any number load side by side; its main() reads the flags and calls
acgan.api (acgan.train(steps=10) is python -m acgan.train --steps 10). A command's flags are generated
from its settings record's fields (define_setting_flags) and belong to the command that defines them:
its --help (-h) lists every flag it takes."""

import contextvars
import inspect
import os
import sys
import typing

from absl import app, flags, logging

from acgan.config import setting_fields
from acgan.errors import (
    DISK_FULL_STATUS,
    LOST_WORKER_STATUS,
    USER_ERROR_STATUS,
    DiskFull,
    LostWorker,
    UserError,
)

# absl makes a flag a key flag (one --help lists) of the module that called DEFINE_*; the helpers below
# define flags for a command, so the command, not this module, claims them.
flags.disclaim_key_flags()


def define_setting_flags(record, names=None, choices=None, defaults=None):
    """A flag for each setting `names` of the settings record `record` (config.setting_fields; default:
    every one with a help text), with its name, default and help (the record's HELPS where it words a
    Config field its own way; choices, defaults: this command's own) and a kind from its type: bool, int,
    float, str (an enum where the field has choices) or tuple (a comma-separated list)."""
    fields = {f.name: f for f in setting_fields(record)}
    for name in names or [n for n, f in fields.items() if "help" in f.metadata]:
        field = fields[name]
        default = (defaults or {}).get(name, field.default)
        help_text = getattr(record, "HELPS", {}).get(name) or field.metadata["help"]
        values = (choices or {}).get(name) or field.metadata.get("choices")
        kind = next((t for t in typing.get_args(field.type) if t is not type(None)), field.type)
        if values:
            flags.DEFINE_enum(name, default, list(values), help_text)
        elif kind is tuple:
            flags.DEFINE_list(name, None if default is None else list(default), help_text)
        else:
            define = {
                bool: flags.DEFINE_boolean,
                int: flags.DEFINE_integer,
                float: flags.DEFINE_float,
                str: flags.DEFINE_string,
            }[kind]
            define(name, default, help_text)


def define_run_flags():
    """--run, --ema, --checkpoint and --backend, for the commands that read a run (checked by the acgan.api
    call; --backend is chosen before Keras loads, default: KERAS_BACKEND, else None: the run's own backend)."""
    flags.DEFINE_string("run", None, "A run folder written by acgan.train.")
    flags.DEFINE_boolean(
        "ema",
        True,
        "Sample from the moving average of G's weights where the run kept one "
        "(--no-ema: from G's own weights).",
    )
    flags.DEFINE_string(
        "checkpoint",
        "latest",
        "latest: the run's newest checkpoint; best: the one its --eval_every evaluations "
        "judged best (the lowest Fréchet distance).",
    )
    flags.DEFINE_string(
        "backend",
        os.environ.get("KERAS_BACKEND"),
        "Keras backend: tensorflow or jax "
        "(default: the KERAS_BACKEND environment variable, else the run's own).",
    )


def flag_arguments(call, typed_only=False):
    """The keyword arguments of `call` (the acgan.api call a command makes) from the flags named as its
    parameters: a command's flags are its call's keywords, which the call turns into its settings (a
    list flag's list into a tuple, ...), so a new setting needs its field and its flag and nothing
    between them. typed_only: only the flags typed (absl marks --nojit, and so --no-jit, as --jit typed)."""
    return {
        name: flags.FLAGS[name].value
        for name in inspect.signature(call).parameters
        if flags.FLAGS[name].present or not typed_only
    }


def fail(message, status=USER_ERROR_STATUS, at_once=False):
    """One line on stderr, then exit with `status`; at_once: without the exit handlers (os._exit), where
    one would wait (JAX's shutdown barrier waits for a lost peer, then aborts)."""
    sys.stderr.write(f"error: {message}\n")
    if at_once:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


def _spell_negations(argv):
    """Accepts `--no-jit` for absl's `--nojit` (boolean flags only)."""
    out = []
    for arg in argv:
        name = arg[len("--no-") :]
        if arg.startswith("--no-") and name in flags.FLAGS and flags.FLAGS[name].boolean:
            arg = "--no" + name
        out.append(arg)
    return out


def _help_asked(argv):
    """ "full" for --helpfull, "short" for -h, --help or --helpshort (before any `--`), else None."""
    options = set(argv[1 : argv.index("--")] if "--" in argv else argv[1:])
    if "--helpfull" in options:
        return "full"
    return "short" if options & {"-h", "-?", "--help", "--helpshort"} else None


def _print_help(main, full):
    """The command's docstring and its flags (its key flags: its own and the shared ones it defined), or
    with `full` every flag absl knows; absl's own --help would exit 1 and skip the shared flags."""
    # absl's name for __main__
    module = sys.argv[0] if main.__module__ == "__main__" else main.__module__
    doc = (main.__globals__.get("__doc__") or f"usage: {sys.argv[0]} [flags]").rstrip()
    listed = flags.FLAGS.get_help() if full else flags.FLAGS.module_help(module)
    more = "" if full else "Try --helpfull to get a list of all flags (absl's own among them).\n"
    try:
        sys.stdout.write(f"{doc}\n\nflags:\n{listed}\n\n{more}")
        sys.stdout.flush()
    except BrokenPipeError:  # `--help | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _parse_flags(argv, main, positional=False):
    asked = _help_asked(argv)
    if asked:
        _print_help(main, full=asked == "full")
        sys.exit(0)
    try:
        rest = flags.FLAGS(_spell_negations(argv))
    except flags.Error as e:
        fail(str(e).splitlines()[0])
    if len(rest) > 1 and not positional:
        fail(f"unexpected arguments: {' '.join(rest[1:])}")
    return rest


def command_line():
    """The command as typed, for reports."""
    name = os.path.basename(sys.argv[0])
    if name.endswith(".py"):
        name = "python -m " + (
            sys.modules["__main__"].__spec__.name if sys.modules["__main__"].__spec__ else name
        )
    return " ".join([name] + sys.argv[1:])


_COMMAND_LINE = contextvars.ContextVar("acgan_command_line", default=None)


def run_main(main, positional=False):
    """Runs `main(argv)` under absl after defining its module's flags (its define_flags); UserError
    becomes one line on stderr and exit status 2, DiskFull one line and exit status 4 (acgan.errors
    holds the statuses). `positional`: argv may hold arguments besides the flags (else an error)."""
    # Quieten TensorFlow's C++ start-up chatter unless the user asked for it.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # the module's, however it was loaded (-m, runpy)
    main.__globals__["define_flags"]()

    def guarded(argv):
        # absl's app.run logs INFO to stderr (TensorFlow's checkpoint chatter among it); keep warnings.
        logging.set_verbosity(logging.WARNING)
        token = _COMMAND_LINE.set(command_line())
        try:
            main(argv)
        except UserError as e:
            fail(str(e))
        except DiskFull as e:
            fail(str(e), status=DISK_FULL_STATUS)
        except LostWorker as e:
            fail(str(e), status=LOST_WORKER_STATUS, at_once=True)
        finally:
            _COMMAND_LINE.reset(token)

    app.run(guarded, flags_parser=lambda argv: _parse_flags(argv, main, positional))


def command_text(name, settings):
    """What a report records as its command: the command line under a command, else this call."""
    line = _COMMAND_LINE.get()  # set by run_main; None when acgan is called from Python
    if line:
        return line
    shown = ", ".join(
        f"{key}={os.fspath(v) if isinstance(v, os.PathLike) else v!r}"
        for key, v in settings.items()
    )
    return f"acgan.{name}({shown})"
