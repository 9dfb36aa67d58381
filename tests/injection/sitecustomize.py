"""Faults injected into acgan's benchmark workers from the outside: a test puts this folder on the
workers' PYTHONPATH (`injected_env`) and names the faults in their environment; Python runs this module
at start-up, and it wraps acgan's functions as their modules are imported. acgan holds no hook.

- FAULTS="oom:16,kill:32": the worker timing the bare step at batch 16 raises its backend's own
  out-of-memory error (tf.errors.ResourceExhaustedError; on JAX a JaxRuntimeError saying
  RESOURCE_EXHAUSTED, as XLA does) once it has built its models and step; the one at batch 32 kills
  itself with SIGKILL, as the kernel's out-of-memory killer would. A third field names one policy:
  "kill:12:float32,oom:12:mixed_float16" fails batch 12's two policies each its own way.
- LOG_DELAY=SECONDS: every metrics read of the training loop (each ends in SummaryWriter.scalars)
  sleeps that long first: a known logging cost for the trainer-overhead measurement to find.
"""

import importlib.abc
import importlib.machinery
import json
import os
import signal
import sys
import time
from pathlib import Path

FAULTS = "ACGAN_TEST_FAULTS"
LOG_DELAY = "ACGAN_TEST_LOG_DELAY"
FOLDER = str(Path(__file__).resolve().parent)


def injected_env(faults=None, log_delay=None, pythonpath=None):
    """The environment variables that inject `faults` and `log_delay` into a benchmark's workers."""
    env = {"PYTHONPATH": os.pathsep.join(p for p in (FOLDER, pythonpath) if p)}
    if faults:
        env[FAULTS] = faults
    if log_delay:
        env[LOG_DELAY] = str(log_delay)
    return env


def _bare_job():
    """(batch, policy) of this worker's job when it times the bare step (python -m acgan.bench.worker
    JOB.json RESULT.json), else (None, None)."""
    try:
        job = json.loads(Path(sys.argv[1]).read_text())
    except (IndexError, OSError, ValueError):
        return None, None
    if job.get("mode") != "bare":
        return None, None
    return job["config"]["batch"], job["config"]["policy"]


def _out_of_memory(message):
    if os.environ.get("KERAS_BACKEND") == "jax":
        import jax

        return jax.errors.JaxRuntimeError(f"RESOURCE_EXHAUSTED: {message}")
    import tensorflow as tf

    return tf.errors.ResourceExhaustedError(None, None, message)


def _faulty_build_step(module):
    wanted = {}  # (batch, policy or None for every policy): fault
    for w in os.environ[FAULTS].split(","):
        if w.strip():
            fault, batch, *policy = w.strip().split(":")
            wanted[(batch, *policy) if policy else (batch, None)] = fault
    honest = module.build_step

    def build_step(*args, **kwargs):
        trainer = honest(*args, **kwargs)
        batch, policy = _bare_job()
        fault = wanted.get((str(batch), policy), wanted.get((str(batch), None)))
        if fault == "oom":
            raise _out_of_memory(f"injected out-of-memory ({FAULTS})")
        if fault == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        return trainer

    module.build_step = build_step


def _slow_scalars(module):
    delay, honest = float(os.environ[LOG_DELAY]), module.SummaryWriter.scalars

    def scalars(self, values, step):
        time.sleep(delay)
        honest(self, values, step)

    module.SummaryWriter.scalars = scalars


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds the named modules as Python would, and runs a patch on each once it has executed."""

    def __init__(self, patches):
        self.patches = patches

    def find_spec(self, name, path=None, target=None):
        if name not in self.patches:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        loader, patch = spec.loader, self.patches[name]

        class Patched(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                patch(module)

        spec.loader = Patched()
        return spec


_patches = {}
if os.environ.get(FAULTS):
    _patches["acgan.step.factory"] = _faulty_build_step
if os.environ.get(LOG_DELAY):
    _patches["acgan.training.tensorboard"] = _slow_scalars
if _patches:
    sys.meta_path.insert(0, _AfterImport(_patches))
