"""Shared fixtures, and the two test sessions: `make test` runs pytest once per Keras backend, as Keras's own
suite does (Keras takes its backend once per process). KERAS_BACKEND=tensorflow (the default) collects every
test outside tests/jax/; KERAS_BACKEND=jax collects tests/jax/ only, in processes where importing TensorFlow
fails (`import_blocker`), so every JAX test also shows that the JAX path never needs it; the files of
BOTH_SESSIONS are collected by both, each running on its session's backend. A test starts a
child process only where the process boundary is what it tests (a signal, a crash, an import that must not
happen, several processes or devices of one run, the other backend).

The dtype policy is global state, so every test that sets it restores float32; the runs several test files
read (the doodles' splits, a tiny run) are session fixtures, made once per test process when a test first
asks for one. `make test` runs each session on two pytest-xdist workers with --dist loadfile: a file's tests
run on one worker, so each module-scoped run is made once. No test asserts a speed: what is timed is checked
by its structure (fields, units, windows, sums), speed claims live in the benchmark.
"""

import os
import shutil
from pathlib import Path

from blocked_imports import TensorFlowBlocker

TESTS = Path(__file__).resolve().parent
BACKEND = os.environ.setdefault("KERAS_BACKEND", "tensorflow")
import_blocker = TensorFlowBlocker()
if BACKEND == "jax":
    import_blocker.install()

from api_runs import FAST_XLA, JaxRun, train_tf_run  # noqa: E402  (after the blocker is installed)

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
    the same programs again and again (a run and its resume, the benchmark's bare step and trainer, a
    two-process run and its one-process twin). EPATH_USE_TF=false: JAX reads that cache through etils.epath,
    which otherwise looks for TensorFlow, and the JAX-only test processes make that import fail.
    """
    if BACKEND == "tensorflow":
        from acgan.training import tf_strategy

        tf_strategy.split_host_cpu(CPU_REPLICAS)
    if (
        "JAX_COMPILATION_CACHE_DIR" not in os.environ
    ):  # removed with the test run's other temporary folders
        os.environ["JAX_COMPILATION_CACHE_DIR"] = str(config._tmp_path_factory.mktemp("jax-cache"))
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
    os.environ.setdefault("EPATH_USE_TF", "false")
    if (
        BACKEND == "jax"
    ):  # this process imported JAX (through Keras) before the variables above were set
        import jax

        jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
        jax.config.update(
            "jax_persistent_cache_min_compile_time_secs",
            float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]),
        )
    # glibc's malloc gives freed step buffers back to the system and maps large ones afresh at every step;
    # keeping them costs memory the tests have, and saves a JAX learning run a tenth of its CPU time.
    for tunable in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_"):
        os.environ.setdefault(tunable, str(1 << 30))


# `make check` runs the tests not marked slow. A test is slow when marked so (it trains, compiles a step or
# starts a process), or when it uses one of these module fixtures, each of which does that once for the tests
# of its file: the benchmark's sweeps, trained runs, trainers, judges, the float64 JAX scripts' results.
SLOW_FIXTURES = {
    "sweep",
    "bench",
    "replicas",
    "runs",
    "jax_runs",
    "float32_runs",
    "float32_run",
    "tf_run",
    "jax_run",
    "exported",
    "loaded",
    "comparison",
    "judge",
    "splits",
    "synchronized_float16",
    "unsynchronized_trainer",
    "float16_trainer",
    "numerics",
    "measured",
}


@pytest.hookimpl(tryfirst=True)  # before -m reads the marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


# Test files both sessions collect, each testing the backend of its session (keras.backend.backend()):
# they import TensorFlow only on TensorFlow.
BOTH_SESSIONS = (TESTS / "step" / "test_algorithm.py",)


def pytest_ignore_collect(collection_path, config):
    """The JAX session collects tests/jax/ and BOTH_SESSIONS only; the TensorFlow session everything
    else."""
    path = Path(collection_path)
    in_jax = path == TESTS / "jax" or TESTS / "jax" in path.parents
    if BACKEND == "jax":
        on_the_way = path in (TESTS, *TESTS.parents) or any(
            path == f or path in f.parents for f in BOTH_SESSIONS
        )
        return None if in_jax or on_the_way else True
    return True if in_jax else None


@pytest.fixture(autouse=True)
def tensorflow_stays_out():
    """In the JAX session, a test after which TensorFlow had been asked for fails, naming the imports."""
    before = len(import_blocker.attempts)
    yield
    attempted = sorted(set(import_blocker.attempts[before:]))
    assert not attempted, f"the JAX path tried to import {attempted}"


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


# The doodles' judge of the quality and learning tests: trained on this many train images a class (5,000 in
# all, a quick judge), tested on the whole 5,000-image test split.
JUDGE_PER_CLASS = 500


@pytest.fixture(scope="session")
def judged_data_dir(tmp_path_factory, data_dir_with_doodles):
    """A data folder with the doodles whose judge (`judge`) is cached in it once per test process, for the
    tests that judge samples (with the data_dir their commands take) and those that test the judge."""
    return data_dir_with_doodles(tmp_path_factory.mktemp("judged-data"))


@pytest.fixture(scope="session")
def judge(judged_data_dir):
    """The doodles' judge (JUDGE_PER_CLASS a class), trained on first use and cached in judged_data_dir."""
    from acgan.data import load_dataset
    from acgan.quality import judge as judge_lib

    test_set = load_dataset(
        "doodles", split="test", data_dir=str(judged_data_dir), max_per_class=JUDGE_PER_CLASS
    )
    return judge_lib.load_or_train(
        "doodles",
        data_dir=str(judged_data_dir),
        max_per_class=JUDGE_PER_CLASS,
        test_set=test_set,
        echo=lambda line: None,
    )


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
