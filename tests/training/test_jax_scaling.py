"""The trainer on JAX over several devices: --strategy on JAX (validation), a run that moves from one
device to four and back (virtual CPU devices, XLA_FLAGS), and the one-line errors. The runs go through
jax_train_runner.py, where TensorFlow cannot be imported."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from acgan.config import Config
from acgan.errors import USER_ERROR_STATUS, UserError

RUNNER = Path(__file__).with_name("jax_train_runner.py")
ROOT = Path(__file__).resolve().parents[2]
TINY = ["--batch", "16", "--width", "0.125", "--warmup_steps", "1", "--log_every", "2", "--max_per_class", "20",
        "--sample_every", "1000"]
FOUR = "--xla_force_host_platform_device_count=4"


def _train_jax(*args, xla_flags=None, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2", JAX_PLATFORMS="cpu")
    env.pop("KERAS_BACKEND", None)
    env.pop("XLA_FLAGS", None)
    if xla_flags:
        env["XLA_FLAGS"] = xla_flags
    done = subprocess.run([sys.executable, str(RUNNER), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert "tensorflow imports attempted: []" in done.stderr, done.stderr[-3000:]
    return done


def _error_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_strategies_on_jax_validate():
    for strategy in ("auto", "default", "mirrored", "multi_worker"):
        Config(backend="jax", strategy=strategy).validate()
    with pytest.raises(UserError, match="--strategy tpu is TensorFlow's"):
        Config(backend="jax", strategy="tpu").validate()
    Config(backend="jax", strategy="multi_worker", coordinator_address="localhost:1234", num_processes=2,
           process_id=1).validate()
    with pytest.raises(UserError, match="--process_id applies to --backend jax --strategy multi_worker"):
        Config(backend="jax", strategy="mirrored", process_id=0).validate()
    with pytest.raises(UserError, match="--process_id 2 must be below --num_processes 2"):
        Config(backend="jax", strategy="multi_worker", num_processes=2, process_id=2).validate()


def test_a_run_moves_from_one_device_to_four_and_back(tmp_path):
    """1 device (steps 1-2), 4 (3-8, the mirrored strategy), 1 again (9-10): checkpoints are full arrays,
    so a resume reads them on any number of devices, and the run reaches the step asked for."""
    run_dir = tmp_path / "run"
    common = ["--output_dir", str(run_dir), "--checkpoint_every", "2", *TINY]
    done = _train_jax("--strategy", "default", "--steps", "2", *common)
    assert done.returncode == 0, done.stderr[-3000:]

    done = _train_jax("--strategy", "mirrored", "--steps", "8", *common, xla_flags=FOUR)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "strategy mirrored: 4 replicas on 1 worker(s), 4 samples each; XLA: step" in done.stdout
    report = json.loads((run_dir / "report.json").read_text())
    layout = report["distribution"]
    assert (layout["strategy"], layout["replicas"], layout["workers"]) == ("mirrored", 4, 1)
    assert layout["replica_devices"] == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"] and layout["synchronized_batch_norm"]
    assert report["resumed_from"]["step"] == 2 and report["steps"] == 8
    timing = report["timing"]
    assert timing["replicas"] == 4
    assert timing["samples_per_second_per_replica"] == pytest.approx(timing["samples_per_second"] / 4)
    assert report["cost"]["priced_units"] == 4  # every device counts
    assert "mirrored: 4 replica(s) (cpu:0, cpu:1, cpu:2, cpu:3), batch norm synchronized" in (
        run_dir / "report.md").read_text()

    done = _train_jax("--strategy", "default", "--steps", "10", *common)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "completed" and report["steps"] == 10 and report["resumed_from"]["step"] == 8
    assert report["distribution"]["replicas"] == 1
    assert [(e["start_step"], e["end_step"], e["replicas"]) for e in report["earlier_sessions"]] == [(0, 2, 1), (2, 8, 4)]


def test_a_global_batch_that_does_not_split_evenly_is_one_line(tmp_path):
    # --devices splits the host CPU into three (jax_num_cpu_devices), as TensorFlow's --devices does.
    done = _train_jax("--strategy", "mirrored", "--devices", "cpu:0,cpu:1,cpu:2", "--steps", "2", "--output_dir",
                      str(tmp_path / "run"), *TINY)
    assert done.returncode == USER_ERROR_STATUS
    assert _error_lines(done.stderr) == ["error: --batch 16 does not divide by the 3 replicas; use a multiple of 3 "
                                         "(it is the global batch)"]
    assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()
