"""Runs the API and export tests share, each made once per test run (under pytest-xdist, once for all
workers: the first to need one makes it while the others wait on its lock):

- tf_run: the reference preset on doodles, mixed_float16 with XLA (the fastest mixed run on a CPU),
  trained by acgan.train in the test process (TensorFlow);
- jax_run: acgan_cifar on swatches in float32 on JAX, in a child process of its own: trained by
  acgan.train, sampled by acgan.generate and exported by the `acgan export` command. When the export
  tests are collected it starts before tf_run trains, so the two share the machine's cores.
"""
import atexit
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Two steps, a checkpoint and a grid at the end; a few images per class. With an average of G (G-EMA), so
# what reads a run (generate, evaluate, export) reads it from the average, on both backends.
TINY = dict(steps=2, batch=8, width=0.125, max_per_class=10, sample_every=2, checkpoint_every=2, warmup_steps=0,
            log_every=1, ema_decay=0.9)
# XLA's backend unoptimized, for the test process and every child (conftest.py sets it): a small step
# compiles in about half the CPU time; what it computes is the same up to float rounding.
FAST_XLA = "--xla_backend_optimization_level=0"
_made = {}

# The export command runs through its main in the same process: the only command whose flags it defines.
JAX_RUN = """
import json, sys
import numpy as np
import acgan
from acgan.__main__ import main
root, tiny = sys.argv[1], json.loads(sys.argv[2])
run = acgan.train(backend="jax", dataset="swatches", output_dir=f"{root}/run", data_dir=f"{root}/data", **tiny)
samples = acgan.generate(run, per_class=2, seed=3)
np.savez(f"{root}/generated.npz", images=samples.images, noise=samples.noise, labels=samples.labels)
try:
    main(["export", "--run", f"{root}/run", "--out", f"{root}/generator.keras"])
except SystemExit as e:
    assert not e.code, e.code
"""


def tf_run(tmp_path_factory, collected=()):
    """The shared TensorFlow run: the acgan.Run that acgan.train returned where this process trained it,
    else the run folder opened. The JAX run starts first if the `collected` tests include
    tests/test_export.py."""
    if any(item.path.name == "test_export.py" for item in collected):
        _start_jax_run(tmp_path_factory)
    if "tf" not in _made:
        import acgan

        folder = shared_folder(tmp_path_factory, "tf")
        with locked(folder / ".lock"):
            if not (folder / "run" / "report.json").exists():
                _made["tf"] = acgan.train(policy="mixed_float16", jit=True, output_dir=str(folder / "run"),
                                          data_dir=str(folder / "data"), **TINY)
        _made.setdefault("tf", acgan.Run(folder / "run"))
    return _made["tf"]


def jax_run(tmp_path_factory, timeout=600):
    """(folder holding run/, generated.npz and generator.keras; the child's stdout), once it is done:
    the process that started the child waits for it, any other for its files."""
    folder = shared_folder(tmp_path_factory, "jax")
    proc = _start_jax_run(tmp_path_factory)
    if proc is not None and "jax-done" not in _made:
        out, err = proc.communicate(timeout=timeout)
        (folder / ("stdout.txt" if proc.returncode == 0 else "failed.txt")).write_text(out if proc.returncode == 0
                                                                                       else err[-3000:])
        _made["jax-done"] = True
    deadline = time.monotonic() + timeout
    while not any((folder / name).exists() for name in ("stdout.txt", "failed.txt")):
        assert time.monotonic() < deadline, "the JAX run did not finish"
        time.sleep(0.5)
    assert not (folder / "failed.txt").exists(), (folder / "failed.txt").read_text()
    return folder, (folder / "stdout.txt").read_text()


def _start_jax_run(tmp_path_factory):
    """Starts the JAX run's child unless a process of this test run has (the one that creates the folder's
    `started` does); returns it where this process started it, else None."""
    if "jax" not in _made:
        folder = shared_folder(tmp_path_factory, "jax")
        try:
            (folder / "started").mkdir()
        except FileExistsError:
            _made["jax"] = None
            return None
        proc = subprocess.Popen([sys.executable, "-c", JAX_RUN, str(folder), json.dumps(TINY)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=child_env(KERAS_BACKEND="jax"), cwd=folder)
        atexit.register(lambda: proc.poll() is None and proc.kill())
        _made["jax"] = proc
    return _made["jax"]


def run_folder(tmp_path_factory):
    """The folder of this test run that every xdist worker and their controller see (the run's temporary
    folder without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared_folder(tmp_path_factory, name):
    """A folder in run_folder, made if missing."""
    folder = run_folder(tmp_path_factory) / f"api-runs-{name}"
    folder.mkdir(exist_ok=True)
    return folder


@contextlib.contextmanager
def locked(lock_path):
    """Holds an exclusive lock on the file `lock_path` (made if missing), across processes."""
    import fcntl

    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


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


def command_flags(*names):
    """{command: {flag: default}} for the acgan commands `names` (KERAS_BACKEND unset), and "absl"."""
    env = child_env()
    env.pop("KERAS_BACKEND", None)
    proc = subprocess.run([sys.executable, "-c", COMMAND_FLAGS, *names], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def acgan_command(*args, cwd=None, env=None, wait=True):
    """`python -m acgan ARGS` (what the `acgan` console command runs): the CompletedProcess, or the
    Popen when wait=False."""
    command = [sys.executable, "-m", "acgan", *[str(a) for a in args]]
    if not wait:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env or child_env(), cwd=cwd or ROOT)
    return subprocess.run(command, capture_output=True, text=True, env=env or child_env(), cwd=cwd or ROOT,
                          timeout=600)
