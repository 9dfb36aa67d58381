"""Shared fixtures: the dtype policy is global state, so every test that sets it restores float32; the
runs several test files read (the doodles' splits, a tiny TensorFlow run, a tiny JAX run) are session
fixtures, made once per test process when a test first asks for one.

`make test` runs the suite on two pytest-xdist workers with --dist loadfile: a file's tests run on one
worker, so each module-scoped run is made once; no test needs the machine to itself: the timing tests
assert ratios whose margins a test on the other core cannot cross. Plain `pytest` runs everything in one
process, in file order.
"""
import os
import shutil
from pathlib import Path

from api_runs import FAST_XLA, JaxRun, train_tf_run
from cpu_times import (  # noqa: F401  (pytest --cpu-times FILE: each test's CPU seconds; hooks, registered here)
    pytest_addoption,
    pytest_runtest_logreport,
    pytest_runtest_makereport,
    pytest_runtest_setup,
    pytest_sessionfinish,
)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# XLA compiles at backend optimisation level 0 in the tests and the processes they start (api_runs.FAST_XLA).
if FAST_XLA not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = " ".join(f for f in (os.environ.get("XLA_FLAGS"), FAST_XLA) if f)

import keras  # noqa: E402
import pytest  # noqa: E402

POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
CPU_REPLICAS = 2

@pytest.hookimpl(trylast=True)  # after pytest's own pytest_configure has made the temporary folders
def pytest_configure(config):
    """Two logical CPU devices, so tf.distribute tests can run two replicas on this one CPU: it must happen
    before TensorFlow sets up its devices, that is before any test runs.

    Then the environment every process of the test run inherits (set in the controller, before xdist
    starts its workers). JAX's persistent compilation cache, one per test run: the suite's JAX runs compile
    the same programs again and again (a run and its resume, the benchmark's bare step and trainer, the
    honest step between injected overflows). EPATH_USE_TF=false: JAX reads that cache through etils.epath,
    which otherwise looks for TensorFlow, and the JAX-only test processes make that import fail.
    """
    from acgan.step import distribute

    distribute.split_host_cpu(CPU_REPLICAS)
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:  # removed with the test run's other temporary folders
        os.environ["JAX_COMPILATION_CACHE_DIR"] = str(config._tmp_path_factory.mktemp("jax-cache"))
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
    os.environ.setdefault("EPATH_USE_TF", "false")
    # glibc's malloc gives freed step buffers back to the system and maps large ones afresh at every step;
    # keeping them costs memory the tests have, and saves a JAX learning run a tenth of its CPU time.
    for tunable in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_"):
        os.environ.setdefault(tunable, str(1 << 30))


@pytest.fixture
def set_policy():
    """Call with a policy name; the global policy goes back to float32 after the test."""
    from acgan.model import precision

    yield precision.set_policy
    keras.mixed_precision.set_global_policy("float32")


@pytest.fixture(scope="session")
def doodles_cache(tmp_path_factory):
    """A data folder holding the doodles' full train and test splits, drawn once per run (~6 s on two
    cores) instead of once per fresh --data_dir; tests read it, or copy it with `data_dir_with_doodles`."""
    from acgan.data import load_dataset

    folder = tmp_path_factory.mktemp("doodles-cache")
    for split in ("train", "test"):
        load_dataset("doodles", split=split, data_dir=str(folder))
    return folder


@pytest.fixture(scope="session")
def data_dir_with_doodles(doodles_cache):
    """Call with a folder: it becomes a data folder with the doodles' splits already cached (a copy, so a
    test may write beside them), as a fresh --data_dir would be after its first run."""
    def make(folder):
        folder = Path(folder)
        shutil.copytree(doodles_cache / "doodles", folder / "doodles", dirs_exist_ok=True)
        return folder
    return make


@pytest.fixture(scope="session")
def tf_run(tmp_path_factory):
    """The API and export tests' TensorFlow run (api_runs.train_tf_run): an acgan.Run."""
    return train_tf_run(tmp_path_factory.mktemp("tf-run"))


@pytest.fixture(scope="session")
def jax_run(tmp_path_factory):
    """The export tests' JAX run (api_runs.JaxRun), started in its child process; .finished() waits for it."""
    child = JaxRun(tmp_path_factory.mktemp("jax-run"))
    yield child
    child.stop()
