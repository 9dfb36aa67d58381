"""Which Keras backend runs the models: TensorFlow (the default) or JAX.

Keras reads KERAS_BACKEND once, when it is first imported, so the entry point chooses before anything
imports Keras: each acgan.api call runs `use(backend)` and only then imports the modules that load
Keras (a command passes its --backend flag to the call). The flag's default is KERAS_BACKEND when that
names a backend acgan supports, so the environment variable is honoured.
"""

import contextlib
import importlib.util
import os
import sys

from acgan.config import validate_backend
from acgan.errors import UserError

# What to run to install a backend (or the onnx extra): acgan installs from its checkout (README, "Install").
INSTALL = {
    name: f"in the acgan checkout, pip install -c constraints.txt -e '.[{name}]'"
    for name in ("tensorflow", "jax", "onnx")
}
# The package Keras's ONNX export converts with, per backend (keras/src/export/onnx.py).
ONNX_CONVERTERS = {"tensorflow": "tf2onnx", "jax": "jax2onnx"}


def default():
    """KERAS_BACKEND when it names a supported backend, else tensorflow (use() rejects the others)."""
    return os.environ.get("KERAS_BACKEND") or "tensorflow"


def use(name):
    """Makes Keras run on `name`; call before Keras is imported. UserError (one line) when the backend is
    unknown, not installed, or another backend already runs in this process."""
    validate_backend(name)
    if "keras" in sys.modules:
        running = sys.modules["keras"].backend.backend()
        if running != name:
            raise UserError(
                f"Keras already runs on {running} in this process; --backend {name} needs a new one"
            )
        return
    if importlib.util.find_spec(name) is None:
        raise UserError(f"--backend {name} needs {name}, which is not installed: {INSTALL[name]}")
    os.environ["KERAS_BACKEND"] = name


@contextlib.contextmanager
def tensorflow_hidden():
    """On the JAX backend, makes `import tensorflow` fail inside the block when TensorFlow is not loaded
    yet: Keras probes it whenever it is installed (`keras.utils.set_random_seed` seeds it, model saving
    checks for tf.TensorShape), and loading it there costs seconds and a gigabyte for nothing."""
    import keras  # here: Keras must load after use() sets its backend

    if keras.backend.backend() == "tensorflow" or "tensorflow" in sys.modules:
        yield
        return
    sys.modules["tensorflow"] = (
        None  # `import tensorflow` raises ImportError: Keras takes it as absent
    )
    try:
        yield
    finally:
        del sys.modules["tensorflow"]


def set_random_seed(seed):
    """keras.utils.set_random_seed, without loading TensorFlow on the JAX backend."""
    import keras  # here: Keras must load after use() sets its backend

    with tensorflow_hidden():
        keras.utils.set_random_seed(seed)


def running():
    keras = sys.modules.get("keras")
    return keras.backend.backend() if keras is not None else None


def chosen(name):
    """backend=None: the one Keras runs on in this process, else KERAS_BACKEND, else tensorflow (another
    value is the one named, checked as --backend is)."""
    return running() or default() if name is None else name


@contextlib.contextmanager
def policy_restored():
    """Puts the global dtype policy back as it was: a call sets the run's policy while it builds models."""
    import keras  # here: after the call has chosen the backend

    previous = keras.mixed_precision.global_policy()
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)
