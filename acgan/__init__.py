"""acgan: train an AC-GAN under float32 / mixed_float16 / mixed_bfloat16 and report what it cost.

From Python (docs/api.md): acgan.train(...), acgan.generate(...), acgan.evaluate(...), acgan.compare(...),
acgan.benchmark(...) and acgan.export(...) take their command's flags as keyword arguments and raise
acgan.UserError with its one-line messages. Each is its acgan.api call, looked up on first use: importing
`acgan` loads neither acgan.api nor a command module, nor Keras. (The command modules, acgan/train.py and
the others, run as python -m acgan.train; an explicit `import acgan.train` binds acgan.train to the module.)
"""

from acgan.errors import DiskFull, LostWorker, UserError  # noqa: F401

__version__ = "0.1.0"  # the one place it is written: pyproject.toml reads it (importlib.metadata.version("acgan"))

CALLS = ("train", "generate", "evaluate", "compare", "benchmark", "export")
RESULTS = ("Run", "Samples", "Exported", "Report")


def __getattr__(name):
    if name in CALLS or name in RESULTS:
        from acgan import api  # here: `import acgan` stays light; api loads no framework either

        return getattr(api, name)
    raise AttributeError(f"module 'acgan' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(CALLS) | set(RESULTS))
