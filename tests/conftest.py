"""Shared fixtures: the dtype policy is global state, so every test that sets it restores float32.

`make test` runs the suite on two pytest-xdist workers (--dist loadgroup); no test needs the machine to
itself: the timing tests assert ratios whose margins a test on the other core cannot cross. Plain `pytest`
runs everything in one process, in file order.
"""
import json
import os
import shutil
from pathlib import Path

from api_runs import FAST_XLA, locked, run_folder
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

# Under xdist, tests start in this order (a worker takes the next test when it is free), so the longest
# go first and no single long test is left running alone at the end. Seconds on a 2-core machine.
LONG_FIRST = (
    "tests/quality/test_quality.py::test_a_small_acgan",
    "tests/training/test_jax_training.py::test_jax_trains_reports_and_resumes_without_tensorflow",
    "tests/training/test_jax_training.py::test_jax_resumes_after_sigkill",
    "tests/step/test_distribute.py::test_a_run_moves_between_two_replicas_and_one_device",
    "tests/step/test_jax_step.py::test_overflow_in_one_loss_skips_only_that_optimizer",
    "tests/measure/test_benchmark.py::test_jax_sweep_never_imports_tensorflow",
    "tests/measure/test_benchmark.py::test_one_sweep_times_both_backends_side_by_side",
    "tests/model/test_arch.py::test_the_preset_trains_on_the_jax_backend_without_tensorflow",
    "tests/step/test_distribute.py::test_sigterm_to_one_worker_stops_both_at_the_same_step",
    "tests/test_train_cli.py::test_acgan_cifar_learning_rates_fall_to_zero_over_the_last_quarter",
    "tests/training/test_faults.py::test_a_full_disk_stops_clearly_and_keeps_the_last_checkpoint",
    "tests/training/test_faults.py::test_damaged_checkpoints_resume_from_the_newest_intact_one",
    "tests/step/test_jax_step.py::test_the_paper_preset_step_matches_the_tf_step",
    "tests/step/test_loss_scaling.py::test_overflow_in_one_loss_skips_only_that_optimizer[d-xla]",
    "tests/step/test_distribute.py::test_two_workers_on_localhost_agree_and_only_the_chief_writes",
    "tests/training/test_faults.py::test_one_writer_per_run_folder_and_a_stale_lock_is_taken_over",
)


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
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        os.environ["JAX_COMPILATION_CACHE_DIR"] = str(run_folder(config._tmp_path_factory) / "jax-cache")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
    os.environ.setdefault("EPATH_USE_TF", "false")
    # glibc's malloc gives freed step buffers back to the system and maps large ones afresh at every step;
    # keeping them costs memory the tests have, and saves a JAX learning run a tenth of its CPU time.
    for tunable in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_"):
        os.environ.setdefault(tunable, str(1 << 30))


# Module-scoped fixtures that train or time something: under xdist the tests reading one of them run on
# one worker (SharedRunScheduling), so it is made once.
SHARED_RUNS = ("bench", "both_backends", "unsynchronized_gan", "runs", "comparison", "float32_runs", "float32_run",
               "doodle_dir", "splits")


def _groups_file(config, worker):
    return run_folder(config._tmp_path_factory) / f"test-groups-{worker}.json"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:  # order matters to the schedule only; serially, keep file order
        def rank(item):
            return next((i for i, prefix in enumerate(LONG_FIRST) if item.nodeid.startswith(prefix)),
                        len(LONG_FIRST))
        items.sort(key=rank)  # stable: the rest keep their order
        groups = {}
        for item in items:
            shared = [name for name in SHARED_RUNS if name in getattr(item, "fixturenames", ())]
            if shared:
                groups[item.nodeid] = f"{item.path.name}::{shared[0]}"
        _groups_file(config, worker).write_text(json.dumps(groups))


def pytest_xdist_make_scheduler(config, log):
    """--dist loadgroup, its groups being the tests that share a module-scoped run (SHARED_RUNS); xdist's own
    xdist_group marks no longer reach its scheduler under pytest 9 (it renames node ids, now derived)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedRunScheduling(LoadScopeScheduling):
        groups = None

        def _split_scope(self, nodeid):
            if self.groups is None:  # every worker has collected by now, and written the same groups
                self.groups = json.loads(_groups_file(config, "gw0").read_text())
            return self.groups.get(nodeid, nodeid)

    return SharedRunScheduling(config, log)


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
    folder = run_folder(tmp_path_factory) / "doodles-cache"
    with locked(str(folder) + ".lock"):
        from acgan.data import load_dataset

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
