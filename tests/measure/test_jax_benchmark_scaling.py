"""acgan.benchmark times JAX's sharded step: --backends jax --strategy mirrored over two CPU devices
(--devices splits the host CPU, as on TensorFlow), global and per-replica figures."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from api_runs import FAST_XLA

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_jax_sweep_times_the_step_over_two_devices(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    env["XLA_FLAGS"] = FAST_XLA  # no device count from outside: --devices makes the two
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "acgan.benchmark",
            "--backends",
            "jax",
            "--strategy",
            "mirrored",
            "--devices",
            "cpu:0,cpu:1",
            "--synthetic",
            "--policies",
            "float32",
            "--batches",
            "8",
            "--width",
            "0.125",
            "--steps",
            "2",
            "--warmup",
            "0",
            "--repeats",
            "1",
            "--no-overhead",
            "--output_dir",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((out / "benchmark.json").read_text())
    (row,) = doc["results"]
    assert row["status"] == "ok", row["reason"]
    assert row["backend"] == "jax" and row["replicas"] == 2 and row["device"].endswith(" x2")
    assert doc["runs"][0]["strategy"] == "mirrored" and row["xla"] == "step"
    assert row["samples_per_second_per_replica"] == pytest.approx(row["samples_per_second"] / 2)
