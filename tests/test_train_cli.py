"""The CLIs end to end on doodles: train per policy, then generate from the run."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from conftest import POLICIES

TINY = ["--steps", "4", "--batch", "16", "--width", "0.125", "--sample_every", "2",
        "--checkpoint_every", "2", "--warmup_steps", "1"]


def _run(module, *args, cwd=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One tiny run per policy (XLA on for mixed_float16, off elsewhere to keep the suite fast)."""
    root = tmp_path_factory.mktemp("runs")
    data_dir = str(root / "data")
    out = {}
    for policy in POLICIES:
        jit = ["--jit"] if policy == "mixed_float16" else ["--no-jit"]
        run_dir = root / policy
        result = _run("acgan.train", "--policy", policy, "--output_dir", str(run_dir),
                      "--data_dir", data_dir, "--price_per_hour", "0.54", *jit, *TINY)
        assert result.returncode == 0, result.stderr[-3000:]
        out[policy] = run_dir
    return out


@pytest.mark.parametrize("policy", POLICIES)
def test_train_writes_grids_report_checkpoints_and_logs(runs, policy):
    run_dir = runs[policy]
    config = json.loads((run_dir / "config.json").read_text())
    assert config["policy"] == policy
    samples = sorted(p.name for p in (run_dir / "samples").iterdir())
    assert samples == ["final.png", "step_0000002.png", "step_0000004.png"]
    grid = Image.open(run_dir / "samples" / "final.png")
    assert grid.height > grid.width * 0.9  # ten rows (classes) by ten columns
    report = json.loads((run_dir / "report.json").read_text())
    assert report["policy"] == policy and report["steps"] == 4 and report["batch"] == 16
    assert report["jit"] == (policy == "mixed_float16")
    assert report["compile_seconds"] > 0
    timing = report["timing"]
    assert timing["measured_steps"] == 2  # 4 steps minus the compile step and 1 warm-up step
    assert timing["time_per_1000_samples_ms"] == pytest.approx(timing["time_per_batch_ms"] * 1000 / 16)
    assert report["cost"]["cost_per_million_batches"] == pytest.approx(
        timing["time_per_batch_ms"] / 1000 * 1e6 / 3600 * 0.54)
    assert report["device"]["kind"] == "CPU" and report["peak_memory_bytes"] > 0
    assert set(report["final_metrics"]) >= {"d_loss", "g_loss", "q_loss", "q_accuracy_real",
                                            "q_accuracy_fake", "g_loss_scale", "q_skipped"}
    expected_scale = 2.0 ** 15 if policy == "mixed_float16" else 1.0
    assert report["final_metrics"]["d_loss_scale"] <= expected_scale
    assert "time per batch" in (run_dir / "report.md").read_text()
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("ckpt-4"))
    assert any((run_dir / "tensorboard").iterdir())


def test_generate_png_and_npz(runs, tmp_path):
    run_dir = runs["mixed_float16"]
    png, npz = tmp_path / "grid.png", tmp_path / "samples.npz"
    assert _run("acgan.generate", "--run", str(run_dir), "--per_class", "3", "--out", str(png)).returncode == 0
    assert Image.open(png).size[0] > 0
    result = _run("acgan.generate", "--run", str(run_dir), "--per_class", "3", "--out", str(npz))
    assert result.returncode == 0, result.stderr[-2000:]
    with np.load(npz) as f:
        assert f["images"].dtype == np.uint8 and f["images"].shape == (30, 28, 28, 1)
        assert list(f["labels"]) == [c for c in range(10) for _ in range(3)]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--policy", "float8"], "--policy"),
        (["--dataset", "mnist"], "unknown dataset 'mnist'"),
        (["--dataset", "quickdraw", "--classes", "airplane,dragonn"], "dragonn"),
        (["--batch", "0"], "--batch must be a positive integer"),
        (["--batch", "-3"], "--batch must be a positive integer"),
        (["--steps", "10", "--minutes", "1"], "only one of --steps, --epochs, --minutes"),
        (["--price_per_hour", "-1"], "--price_per_hour must be a positive number"),
        (["--batch", "1000000"], "larger than the dataset"),
        (["stray"], "unexpected arguments"),
    ],
)
def test_bad_flags_give_one_line_and_exit_2(args, message, tmp_path):
    result = _run("acgan.train", "--output_dir", str(tmp_path / "run"), *args, cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and message in lines[-1], result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


def test_generate_refuses_a_folder_without_a_run(tmp_path):
    result = _run("acgan.generate", "--run", str(tmp_path), "--out", str(tmp_path / "x.png"))
    assert result.returncode == 2 and "not a readable acgan run folder" in result.stderr
