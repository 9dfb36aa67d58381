"""acgan: train an AC-GAN under float32 / mixed_float16 / mixed_bfloat16 and report what it cost.

From Python (docs/api.md): acgan.train(...), acgan.generate(...), acgan.evaluate(...), acgan.compare(...),
acgan.benchmark(...) and acgan.export(...) take their command's flags as keyword arguments and raise
acgan.UserError with its one-line messages. Each is its command module (acgan/train.py, ...), made
callable as its acgan.api call; importing `acgan` loads none of them, nor Keras.
"""
import importlib

from acgan.errors import DiskFull, UserError  # noqa: F401

CALLS = ("train", "generate", "evaluate", "compare", "benchmark", "export")
RESULTS = ("Run", "Samples", "Exported", "Report")


def __getattr__(name):
    if name in CALLS:
        return importlib.import_module(f"acgan.{name}")  # the command module; calling it is the API call
    if name in RESULTS:
        return getattr(importlib.import_module("acgan.api"), name)
    raise AttributeError(f"module 'acgan' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(CALLS) | set(RESULTS))
