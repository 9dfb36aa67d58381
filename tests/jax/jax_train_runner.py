"""Runs `python -m acgan.train ARGS` in a process where TensorFlow cannot be imported, for the JAX
backend's tests (the test process itself runs Keras on TensorFlow).

    python tests/training/jax_train_runner.py [--nan] ARGS...

Every attempt to import tensorflow or tensorflow_datasets fails (ImportError) and is recorded; at
exit the attempts are printed to stderr as `tensorflow imports attempted: [...]`, so a test sees an
attempt that something caught and went on from. --nan (test only) makes D's loss NaN from the first step.
"""
import atexit
import importlib.abc
import os
import runpy
import sys

BLOCKED = ("tensorflow", "tensorflow_datasets")
attempts = []


class BlockTensorFlow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            attempts.append(name)
            raise ImportError(f"{name} is blocked in this test process")
        return None


sys.meta_path.insert(0, BlockTensorFlow())
atexit.register(lambda: sys.stderr.write(f"\ntensorflow imports attempted: {sorted(set(attempts))}\n"))

args = sys.argv[1:]
if args[:1] == ["--nan"]:
    args = args[1:]
    os.environ["KERAS_BACKEND"] = "jax"  # the step module imports Keras, before acgan.train would choose
    from acgan.step import losses

    honest = losses.bce
    losses.bce = lambda target, logits: honest(target, logits) * float("nan")
sys.argv = ["acgan.train", "--backend", "jax", *args]
runpy.run_module("acgan.train", run_name="__main__", alter_sys=True)
