"""Runs `python -m acgan.train --backend jax ARGS` in a child process where TensorFlow cannot be imported,
for the JAX tests whose process boundary is the point (a process killed, several devices or processes):

    python tests/jax/jax_train_runner.py ARGS...

Every attempt to import tensorflow or tensorflow_datasets fails (ImportError) and is recorded; at
exit the attempts are printed to stderr as `tensorflow imports attempted: [...]`, so a test sees an
attempt that something caught and went on from.
"""

import atexit
import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for blocked_imports
from blocked_imports import TensorFlowBlocker  # noqa: E402

blocker = TensorFlowBlocker()
blocker.install()
atexit.register(
    lambda: sys.stderr.write(f"\ntensorflow imports attempted: {sorted(set(blocker.attempts))}\n")
)

args = sys.argv[1:]
sys.argv = ["acgan.train", "--backend", "jax", *args]
runpy.run_module("acgan.train", run_name="__main__", alter_sys=True)
