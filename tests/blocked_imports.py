"""Makes importing TensorFlow fail in a process and records every attempt, caught or not: the JAX test
session's processes (conftest.py) and the JAX trainer's child processes (jax/jax_train_runner.py) show with
it that the JAX path never needs TensorFlow."""

import contextlib
import importlib.abc
import sys

BLOCKED = ("tensorflow", "tensorflow_datasets")


class TensorFlowBlocker(importlib.abc.MetaPathFinder):
    def __init__(self):
        self.attempts = []

    def install(self):
        """First in sys.meta_path: before anything imports Keras."""
        sys.meta_path.insert(0, self)

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            self.attempts.append(name)
            raise ImportError(f"{name} is blocked in this test process")
        return None

    @contextlib.contextmanager
    def ignored(self):
        """A test's own reading that tries TensorFlow and falls back without it (tensorboard's
        EventAccumulator): still blocked, not held against the code under test."""
        before = len(self.attempts)
        yield
        del self.attempts[before:]
