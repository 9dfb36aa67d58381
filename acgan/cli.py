"""Shared CLI plumbing: absl flag parsing where every user error is one line and exit status 2.

A command module (acgan/train.py, ...) defines its flags in define_flags(), which run_main calls, so
importing one defines nothing and any number load side by side; its main() reads the flags and calls
acgan.api (acgan.train(steps=10) is python -m acgan.train --steps 10). The shared flags (define_*)
belong to the command that defines them: its --help (-h) lists every flag it takes."""
import contextvars
import dataclasses
import os
import sys

from absl import app, flags, logging

from acgan import backend
from acgan.config import STRATEGIES
from acgan.errors import DISK_FULL_STATUS, USER_ERROR_STATUS, DiskFull, UserError

# absl makes a flag a key flag (one --help lists) of the module that called DEFINE_*; the helpers below
# define flags for a command, so the command, not this module, claims them.
flags.disclaim_key_flags()


def define_data_flags(classes=True):
    """--dataset, --classes, --data_dir, --max_per_class: which images a command trains or times on."""
    flags.DEFINE_string("dataset", "doodles", "doodles, swatches, quickdraw, cifar10, npz:PATH or folder:PATH.")
    if classes:
        flags.DEFINE_list("classes", None, "Quick-Draw classes (default: airplane,apple,bee,bird,book,clock,cow,dog,eye,fish).")
    flags.DEFINE_string("data_dir", "data", "Folder for downloads, caches and the judge.")
    flags.DEFINE_integer("max_per_class", None, "Use at most this many images per class.")


def define_model_flags(jit=True):
    """--arch, --width and (unless a command sweeps it) --jit: how the models are built and compiled."""
    flags.DEFINE_string("arch", "auto", "Model preset: reference (the original experiment's design), acgan_cifar "
                        "(the AC-GAN paper's CIFAR-10 networks) or auto: acgan_cifar for 32x32x3 images, else "
                        "reference.")
    flags.DEFINE_float("width", 1.0, "Channel multiplier (channels stay multiples of 8).")
    if jit:
        flags.DEFINE_boolean("jit", True, "Compile the train step with XLA (--nojit or --no-jit to turn off).")


def define_loss_flag():
    """--loss: D's and G's real/fake loss, for the commands that train (acgan.train, acgan.compare)."""
    flags.DEFINE_string("loss", "auto", "D's and G's real/fake loss: nonsaturating (the AC-GAN paper's binary "
                        "cross-entropy), hinge, or auto: the preset's (nonsaturating for both).")


def define_ema_decay_flag():
    """--ema_decay: the moving average of G's weights, for the commands that train (acgan.train, acgan.compare)."""
    flags.DEFINE_float("ema_decay", None, "Decay of the moving average of G's weights that grids and evaluations "
                       "sample from (G-EMA; 0: none; default: the preset's).")


def define_ema_flag():
    """--ema / --no-ema: sample from G's average or from G's own weights, for the commands that read a run."""
    flags.DEFINE_boolean("ema", True, "Sample from the moving average of G's weights where the run kept one "
                         "(--no-ema: from G's own weights).")


def define_backend_flag(of_run=False):
    """--backend tensorflow|jax; the acgan.api call chooses it before Keras loads. Default: KERAS_BACKEND,
    else tensorflow, or (of_run: commands that read a run) None, meaning the run's own backend."""
    if of_run:
        flags.DEFINE_string("backend", os.environ.get("KERAS_BACKEND"), "Keras backend: tensorflow or jax "
                            "(default: the KERAS_BACKEND environment variable, else the run's own).")
    else:
        flags.DEFINE_string("backend", backend.default(), "Keras backend: tensorflow or jax (default: the "
                            "KERAS_BACKEND environment variable, else tensorflow).")


def define_seed_flag(help_text="Random seed for weights, noise, data order and grids."):
    flags.DEFINE_integer("seed", 0, help_text)


def define_labels_flag():
    """--labels / --no-labels: each sample grid row named by its class in a left margin, or the bare grid."""
    flags.DEFINE_boolean("labels", True, "Label each row of a sample grid with its class name (--no-labels: "
                         "the bare grid).")


def define_price_flag():
    flags.DEFINE_float("price_per_hour", None, "USD per hour of this machine, for the cost of 10^6 batches "
                       "(overrides the shipped price table).")


def define_strategy_flags(exclude=()):
    """--strategy and --devices, as acgan.train and acgan.benchmark both take them."""
    flags.DEFINE_enum("strategy", "auto", [s for s in STRATEGIES if s not in exclude],
                      "tf.distribute strategy, or on JAX a device mesh (auto: mirrored when more than one GPU "
                      "is visible; on JAX, every local device when there are several).")
    flags.DEFINE_list("devices", None, "Devices for --strategy mirrored, e.g. gpu:0,gpu:1 (cpu:0,cpu:1 splits the CPU).")
    if "multi_worker" not in exclude:  # JAX's multi_worker (TensorFlow's reads TF_CONFIG)
        flags.DEFINE_string("coordinator_address", None, "JAX multi_worker: process 0's host:port (default: "
                            "JAX_COORDINATOR_ADDRESS, or JAX's cluster detection).")
        flags.DEFINE_integer("num_processes", None, "JAX multi_worker: how many processes (default: JAX_NUM_PROCESSES).")
        flags.DEFINE_integer("process_id", None, "JAX multi_worker: this process's id, 0 to num_processes - 1 "
                             "(default: JAX_PROCESS_ID); process 0 writes the run's files.")


def settings_from_flags(settings_class, flag_values=flags.FLAGS, **given):
    """settings_class (a dataclass: Config, CompareSettings, SweepSettings) built from the flags named as
    its fields, so a new setting needs its field and its flag and nothing between them. A list flag gives
    a tuple (an empty one None); `given` sets the fields whose flag needs parsing or has another name."""
    values = {}
    for field in dataclasses.fields(settings_class):
        if field.name in given or field.name not in flag_values:
            continue
        value = flag_values[field.name].value
        values[field.name] = (tuple(value) or None) if isinstance(value, list) else value
    return settings_class(**values, **given)


def fail(message, status=USER_ERROR_STATUS):
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


def _help_asked(argv):
    """"full" for --helpfull, "short" for -h, --help or --helpshort (before any `--`), else None."""
    options = set(argv[1:argv.index("--")] if "--" in argv else argv[1:])
    if "--helpfull" in options:
        return "full"
    return "short" if options & {"-h", "-?", "--help", "--helpshort"} else None


def _print_help(main, full):
    """The command's docstring and its flags (its key flags: its own and the shared ones it defined), or
    with `full` every flag absl knows; absl's own --help would exit 1 and skip the shared flags."""
    module = sys.argv[0] if main.__module__ == "__main__" else main.__module__  # absl's name for __main__
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
    argv = sys.argv
    name = os.path.basename(argv[0])
    if name == "__main__.py" or name.endswith(".py"):
        name = "python -m " + (sys.modules["__main__"].__spec__.name if sys.modules["__main__"].__spec__ else name)
    return " ".join([name] + argv[1:])


_COMMAND_LINE = contextvars.ContextVar("acgan_command_line", default=None)


def running_command_line():
    """The command line of the command running now (run_main), or None when acgan is called from Python."""
    return _COMMAND_LINE.get()


def run_main(main, positional=False):
    """Runs `main(argv)` under absl after defining its module's flags (its define_flags); UserError
    becomes one line on stderr and exit status 2, DiskFull one line and exit status 4 (acgan.errors
    holds the statuses). `positional`: argv may hold arguments besides the flags (else an error)."""
    # Quieten TensorFlow's C++ start-up chatter unless the user asked for it.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    define_flags = main.__globals__.get("define_flags")  # the module's, however it was loaded (-m, runpy)
    if define_flags is not None:
        define_flags()

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
        finally:
            _COMMAND_LINE.reset(token)

    app.run(guarded, flags_parser=lambda argv: _parse_flags(argv, main, positional))
