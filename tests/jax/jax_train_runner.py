"""Runs `python -m acgan.train --backend jax ARGS` in a child process where TensorFlow cannot be imported,
for the JAX tests whose process boundary is the point (a process killed, several devices or processes):

    python tests/jax/jax_train_runner.py ARGS...

Every attempt to import tensorflow or tensorflow_datasets fails (ImportError) and is recorded; at
exit the attempts are printed to stderr as `tensorflow imports attempted: [...]`, so a test sees an
attempt that something caught and went on from.
"""
import atexit
import importlib.abc
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
sys.argv = ["acgan.train", "--backend", "jax", *args]
runpy.run_module("acgan.train", run_name="__main__", alter_sys=True)
