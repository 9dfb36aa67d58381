"""The runs the API and export tests share (conftest.py makes each once per test process, as session
fixtures), and helpers for tests that start acgan's commands:

- tf_run: the reference preset on doodles, mixed_float16 with XLA (the fastest mixed run on a CPU),
  trained by acgan.train in the test process (TensorFlow);
- jax_run: acgan_cifar on swatches in float32 on JAX, in a child process of its own (one backend per
  process): trained by acgan.train for one step (JAX_TINY), sampled by acgan.generate, exported by acgan.export as a .keras file
  and by the `acgan export --format onnx` command as an ONNX file (jax2onnx).
"""

import functools
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Two steps, a checkpoint and a grid at the end; a few images per class. With an average of G (G-EMA), so
# what reads a run (generate, evaluate, export) reads it from the average, on both backends.
TINY = dict(
    steps=2,
    batch=8,
    width=0.125,
    max_per_class=10,
    sample_every=2,
    checkpoint_every=2,
    warmup_steps=0,
    log_every=1,
    ema_decay=0.9,
)
# The JAX run trains one step, its checkpoint and grid at the end: what the export tests read (a checkpoint
# of G's average) needs only one, and the child's CPU goes to importing JAX and compiling the step.
JAX_TINY = dict(TINY, steps=1, sample_every=None, checkpoint_every=1)
# XLA's backend unoptimized, for the test process and every child (conftest.py sets it): a small step
# compiles in about half the CPU time; what it computes is the same up to float rounding.
FAST_XLA = "--xla_backend_optimization_level=0"

# The export command runs through its main in the same process (once: a second run would define its flags
# again), after the call has exported the .keras file.
JAX_RUN = """
import json, sys
import numpy as np
import acgan
from acgan.__main__ import main
root, tiny = sys.argv[1], json.loads(sys.argv[2])
run = acgan.train(backend="jax", dataset="swatches", output_dir=f"{root}/run", data_dir=f"{root}/data", **tiny)
samples = acgan.generate(run, per_class=2, seed=3)
np.savez(f"{root}/generated.npz", images=samples.images, noise=samples.noise, labels=samples.labels)
acgan.export(run, out=f"{root}/generator.keras")
try:
    main(["export", "--run", f"{root}/run", "--out", f"{root}/generator.onnx", "--format", "onnx"])
except SystemExit as e:
    assert not e.code, e.code
print("tensorflow imported:", sys.modules.get("tensorflow") is not None)  # installed, and not needed on JAX
"""


def train_tf_run(folder):
    """The shared TensorFlow run (conftest.py's session fixture `tf_run`), trained by acgan.train in this
    process into `folder`; the acgan.Run it returns."""
    import acgan

    return acgan.train(
        policy="mixed_float16",
        jit=True,
        output_dir=str(folder / "run"),
        data_dir=str(folder / "data"),
        **TINY,
    )


class JaxRun:
    """The shared JAX run (conftest.py's session fixture `jax_run`): its child starts when made, so it trains
    while this process does other work; `finished()` waits for it and returns (its folder, holding run/,
    generated.npz, generator.keras and generator.onnx; the child's stdout, ending in whether it imported
    TensorFlow)."""

    def __init__(self, folder):
        self.folder = folder
        self.proc = subprocess.Popen(
            [sys.executable, "-c", JAX_RUN, str(folder), json.dumps(JAX_TINY)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(KERAS_BACKEND="jax"),
            cwd=folder,
        )
        self.out = None

    def finished(self, timeout=600):
        if self.out is None:
            out, err = self.proc.communicate(timeout=timeout)
            assert self.proc.returncode == 0, err[-3000:]
            self.out = out
        return self.folder, self.out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def child_env(**extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


# Defines each command's flags in turn in one child process (removing them before the next command, whose
# flags share names) and prints their defaults; absl's own flags (--helpfull, ...) under "absl".
COMMAND_FLAGS = r"""
import importlib, json, sys
from absl import app, flags
app.define_help_flags()
defaults = {"absl": {n: None for n in flags.FLAGS}}
for name in sys.argv[1:]:
    module = importlib.import_module(f"acgan.{name}")
    before = set(flags.FLAGS)
    module.define_flags()
    new = [n for n in flags.FLAGS if n not in before]
    defaults[name] = {n: flags.FLAGS[n].default for n in new}
    for n in new:
        delattr(flags.FLAGS, n)
print(json.dumps(defaults))
"""


def float64_jax_script(script):
    """Runs `script` in a child process on JAX's CPU backend with float64 enabled (the numerical checks of
    acgan's own JAX formulations) and returns the JSON its last line prints."""
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", JAX_ENABLE_X64="1")
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def command_flags(*names):
    """{command: {flag: default}} for the acgan commands `names` (KERAS_BACKEND unset), and "absl"."""
    env = child_env()
    env.pop("KERAS_BACKEND", None)
    proc = subprocess.run(
        [sys.executable, "-c", COMMAND_FLAGS, *names],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def acgan_command(*args, cwd=None, env=None, wait=True):
    """`python -m acgan ARGS` (what the `acgan` console command runs): the CompletedProcess, or the
    Popen when wait=False."""
    command = [sys.executable, "-m", "acgan", *[str(a) for a in args]]
    if not wait:
        return subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env or child_env(),
            cwd=cwd or ROOT,
        )
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=env or child_env(),
        cwd=cwd or ROOT,
        timeout=600,
    )


# The figures every benchmark folder holds.
BENCHMARK_FIGURES = (
    "time_per_batch.png",
    "time_per_1000_samples.png",
    "cost_per_million_batches.png",
    "tflops.png",
)
# Runs python -m acgan.benchmark in this process's place, as `python -m` runs it (alter_sys: sys.argv[0] the
# module's file, the module as __main__, so the command line it records is the user's), and prints, at exit,
# which of Keras, TensorFlow and JAX the sweep's own (parent) process imported: none, as the workers load
# their backends.
PARENT_PROBE = """
import atexit, runpy, sys
atexit.register(lambda: print("parent imported:", sorted(m for m in ("keras", "tensorflow", "jax")
                                                          if sys.modules.get(m) is not None)))
sys.argv = ["acgan.benchmark"] + sys.argv[1:]
runpy.run_module("acgan.benchmark", run_name="__main__", alter_sys=True)
"""


def run_parent_probe(*args, env=None, timeout=600):
    """python -m acgan.benchmark ARGS through PARENT_PROBE: the CompletedProcess, its stdout ending in the
    line "parent imported: [...]". env: more variables (PYTHONPATH goes after the checkout's)."""
    return subprocess.run(
        [sys.executable, "-c", PARENT_PROBE, *args],
        capture_output=True,
        text=True,
        env=child_env(**(env or {})),
        cwd=ROOT,
        timeout=timeout,
    )


def newest_checkpoint_step(run_dir):
    """The step --resume restores: the newest intact checkpoint on disk (None before the first). Not
    tf.train.latest_checkpoint, which reads only the state file: a run killed between writing a checkpoint
    and updating that file leaves it one save behind what resume finds, and a test that asked for a step
    between the two failed (about once in three full runs of the suite)."""
    from acgan.training import checkpoints

    latest = checkpoints.newest_intact(Path(run_dir) / "checkpoints")
    return None if latest is None else checkpoints.step_of(latest)


@functools.cache
def _train_main():
    """The train command module's main, its module run once per process: runpy, as `python -m acgan.train`
    runs it, so `acgan.train` stays the Python call (importing the module would bind that name to it), and
    once, as absl refuses a second definition of its flags."""
    return runpy.run_module("acgan.train")["main"]


def train_command_in_process(argv, monkeypatch, capsys):
    """`python -m acgan.train ARGV` in this process, through cli.run_main as the command runs (its one-line
    errors and exit statuses; TensorFlow is loaded once, not per run): (exit status, stdout, stderr), 0 for
    a run that completed. capsys: pytest's; what it held before is dropped."""
    import pytest
    from absl import flags

    from acgan import cli

    capsys.readouterr()
    flags.FLAGS.unparse_flags()
    monkeypatch.setattr(sys, "argv", ["acgan.train", *[str(a) for a in argv]])
    with pytest.raises(SystemExit) as exit_info:
        cli.run_main(_train_main())
    flags.FLAGS.unparse_flags()
    out, err = capsys.readouterr()
    return exit_info.value.code or 0, out, err
