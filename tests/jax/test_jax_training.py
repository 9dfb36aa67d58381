"""The trainer on the JAX backend, in this process (where TensorFlow cannot be imported: conftest.py): it
trains, reports, writes TensorBoard events and grids, checkpoints, resumes (after SIGKILL too, in a child
process: the kill is what is tested) and stops on divergence."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import acgan
from acgan.errors import USER_ERROR_STATUS
from acgan.step import losses
from conftest import import_blocker

RUNNER = Path(__file__).with_name("jax_train_runner.py")
ROOT = Path(__file__).resolve().parents[2]
TINY = dict(batch=16, width=0.125, warmup_steps=1, log_every=2)
TINY_FLAGS = ["--batch", "16", "--width", "0.125", "--warmup_steps", "1", "--log_every", "2"]


def _train_jax_child(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("KERAS_BACKEND", None)
    return subprocess.Popen(
        [sys.executable, str(RUNNER), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _steps_saved(run_dir):
    return sorted(int(p.stem.split("-")[1]) for p in (run_dir / "checkpoints").glob("ckpt-*.npz"))


@pytest.mark.slow
def test_jax_trains_reports_and_resumes_without_tensorflow(tmp_path, set_policy, capsys):
    run_dir = tmp_path / "run"
    common = dict(output_dir=str(run_dir), checkpoint_every=4, sample_every=4, **TINY)
    # With an evaluation at the end: the judge trains, is saved and loaded without TensorFlow too.
    run = acgan.train(
        backend="jax",
        policy="mixed_float16",
        steps=8,
        price_per_hour=3.6,
        eval_every=8,
        eval_samples=50,
        max_per_class=60,
        data_dir=str(tmp_path / "data"),
        **common,
    )
    assert run.status == "completed", run.message
    first = json.loads((run_dir / "report.json").read_text())
    assert (
        first["config"]["backend"] == "jax"
        and first["device"]["backend"] == "jax"
        and first["device"]["kind"] == "CPU"
    )
    assert first["status"] == "completed" and first["steps"] == 8
    assert first["timing"]["measured_steps"] > 0 and first["timing"]["bare_step_ms"] > 0
    # 3.6 USD an hour is 0.001 USD a second: 10^6 batches of t ms cost t USD.
    assert first["cost"]["cost_per_million_batches"] == pytest.approx(
        first["timing"]["time_per_batch_ms"]
    )
    assert first["peak_memory_bytes"] > 0
    assert first["distribution"]["xla"] == "step" and first["distribution"]["replicas"] == 1
    assert (
        first["quality_during_training"]["step"] == 8
        and first["quality_during_training"]["num_generated"] == 50
    )
    # Precision, recall, density and coverage (k = 5) overall, 50 samples against 50 real test images; none
    # per class, whose 5 samples are too few; the report's sentence carries them beside their reference.
    during = first["quality_during_training"]
    assert (
        during["prdc_nearest_k"] == 5
        and 0 <= during["recall"] <= 1
        and during["recall_class_mean"] is None
    )
    assert (
        f"precision / recall / density / coverage {during['precision']:.2f} / {during['recall']:.2f} / "
        f"{during['density']:.2f} / {during['coverage']:.2f} (real vs real "
        f"{during['real_reference']['precision']:.2f} / "
    ) in (run_dir / "report.md").read_text()
    assert _steps_saved(run_dir) == [4, 8]
    # The one evaluation's checkpoint is the best one, apart from the rotation, with its numbers.
    best = first["best_checkpoint"]
    assert best["step"] == 8 and best["checkpoint"] == "checkpoints/best/ckpt-8.npz"
    assert best["frechet_distance"] == during["frechet_distance"] and best["num_generated"] == 50
    assert sorted(p.name for p in (run_dir / "checkpoints" / "best").iterdir()) == ["ckpt-8.npz"]
    assert sorted(p.name for p in (run_dir / "samples").glob("*.png")) == [
        "final.png",
        "step_0000004.png",
        "step_0000008.png",
    ]
    saved = np.load(run_dir / "checkpoints" / "ckpt-8.npz")
    assert (
        int(saved["step"]) == 8
        and json.loads(str(saved["history/sessions_json"]))[0]["end_step"] == 8
    )
    capsys.readouterr()

    run = acgan.train(backend="jax", steps=12, **common)  # the run's settings come from its folder
    assert run.status == "completed", run.message
    assert "resuming" in capsys.readouterr().out
    report = json.loads((run_dir / "report.json").read_text())
    assert report["config"]["policy"] == "mixed_float16" and report["steps"] == 12
    assert report["resumed_from"]["step"] == 8 and len(report["earlier_sessions"]) == 1
    assert report["resumed_from"]["loss_scales"] == {
        n: first["final_metrics"][f"{n}_loss_scale"] for n in "dgq"
    }
    assert _steps_saved(run_dir) == [4, 8, 12]
    assert report["best_checkpoint"] == best  # kept: the resumed session judged nothing better

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with import_blocker.ignored():  # the reader tries TensorFlow, then reads without it
        events = EventAccumulator(
            str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "images": 0}
        )
        events.Reload()
    # Each session reads its compile step (1, 9), then every 2nd; the bare step after the last logs nothing.
    assert [e.step for e in events.Scalars("d_loss")] == [1, 2, 4, 6, 8, 9, 10, 12]
    assert [e.step for e in events.Images("samples")] == [
        4,
        8,
        8,
        12,
        12,
    ]  # step grids and the two finals

    # The run's checkpoints read back for acgan.generate and evaluate (on TensorFlow too: tests/test_export.py).
    from acgan.training import sampling

    _, info, trainer = sampling.load_run(run_dir)
    z, labels = sampling.generator_inputs(len(info["class_names"]), trainer.noise_dim, 2, seed=0)
    images = sampling.generate_images(trainer, z, labels)
    assert images.shape == (20, 28, 28, 1) and images.dtype == np.uint8 and images.std() > 0
    _, _, best_step = sampling.load_run(run_dir, checkpoint="best")
    assert int(trainer.step.numpy()) == 12 and int(best_step.step.numpy()) == 8


@pytest.mark.slow
def test_jax_resumes_after_sigkill(tmp_path):
    run_dir = tmp_path / "run"
    proc = _train_jax_child(
        "--policy",
        "mixed_float16",
        "--steps",
        "100000",
        "--output_dir",
        str(run_dir),
        "--checkpoint_every",
        "3",
        "--sample_every",
        "1000",
        *TINY_FLAGS,
    )
    deadline = time.time() + 240
    while not any(step >= 6 for step in _steps_saved(run_dir)):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = _steps_saved(run_dir)[-1]
    saved = np.load(run_dir / "checkpoints" / f"ckpt-{killed_at}.npz")
    scales = {n: float(saved[f"optimizers/{n}_optimizer/dynamic_scale"]) for n in "dgq"}

    # in this process
    run = acgan.train(backend="jax", steps=killed_at + 2, resume=True, output_dir=str(run_dir))
    assert run.status == "completed", run.message
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "completed" and report["steps"] == killed_at + 2
    assert report["resumed_from"] == {
        "step": killed_at,
        "checkpoint": str(run_dir / "checkpoints" / f"ckpt-{killed_at}.npz"),
        "loss_scales": scales,
    }
    assert report["earlier_sessions"][0]["end_step"] == killed_at
    assert _steps_saved(run_dir)[-1] == killed_at + 2


@pytest.mark.slow
def test_jax_divergence_stops_without_a_checkpoint(tmp_path, monkeypatch, set_policy):
    honest = losses.bce
    # D's loss NaN
    monkeypatch.setattr(losses, "bce", lambda target, logits: honest(target, logits) * float("nan"))
    run_dir = tmp_path / "run"
    run = acgan.train(backend="jax", steps=10, output_dir=str(run_dir), checkpoint_every=4, **TINY)
    assert run.status == "diverged" and (
        "non-finite" in run.message or "diverged" in run.message.lower()
    )
    assert _steps_saved(run_dir) == []
    assert json.loads((run_dir / "report.json").read_text())["status"] == "diverged"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--strategy", "tpu"], "--strategy tpu is TensorFlow's TPUStrategy"),
        (["--backend", "torch"], "unknown backend 'torch'"),
    ],
)
def test_backend_errors_are_one_line(args, message, tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "acgan.train",
            "--backend",
            "jax",
            *args,
            "--steps",
            "1",
            "--output_dir",
            str(tmp_path / "run"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == USER_ERROR_STATUS
    assert (
        result.stderr.strip().splitlines() == [f"error: {result.stderr.strip()[7:]}"]
        and message in result.stderr
    )


class _State:
    """Stands in for JaxStep: state() / load_state() of a few arrays."""

    def __init__(self, step=0):
        self.values = {"step": np.array(step), "models/generator/w": np.full(3, float(step))}

    def state(self):
        return dict(self.values)

    def load_state(self, values):
        if set(values) != set(self.values):
            raise ValueError("state keys differ")
        self.values = dict(values)


def test_jax_checkpoints_keep_the_newest_and_set_damaged_ones_aside(tmp_path, capsys):
    from acgan.errors import UserError
    from acgan.training.jax_checkpoints import JaxCheckpoints

    directory = tmp_path / "checkpoints"
    for step in (2, 4, 6):
        JaxCheckpoints(_State(step), directory, keep=2).save(
            step, [{"session": 0, "end_step": step}]
        )
    assert _steps_saved(tmp_path) == [4, 6]
    newest = directory / "ckpt-6.npz"
    newest.write_bytes(newest.read_bytes()[:-40])  # truncated: its zip directory is gone

    restored = _State()
    store = JaxCheckpoints(restored, directory, keep=2)
    latest, history = store.restore(directory)
    assert latest == str(directory / "ckpt-4.npz") and history == [{"session": 0, "end_step": 4}]
    assert (
        int(restored.values["step"]) == 4
        and restored.values["models/generator/w"].tolist() == [4.0] * 3
    )
    assert "ckpt-6.npz is damaged" in capsys.readouterr().err
    assert (directory / "damaged" / "ckpt-6.npz").is_file() and _steps_saved(tmp_path) == [4]

    other = _State()
    other.values["models/generator/v"] = np.zeros(2)  # a model this checkpoint was not written for
    with pytest.raises(
        UserError,
        match="^cannot resume: the checkpoints in .* read whole, but none fits the model "
        ".*ckpt-4.npz does not load.*start a new run with another --output_dir$",
    ):
        JaxCheckpoints(other, directory, keep=2).restore(directory)
    assert (directory / "ckpt-4.npz").is_file()  # not taken for damage: not moved
    (directory / "ckpt-4.npz").write_bytes(b"not a zip")
    # The same words as TensorFlow's resume (tests/training/test_faults.py).
    with pytest.raises(
        UserError, match="^cannot resume: no intact checkpoint .*another --output_dir$"
    ):
        JaxCheckpoints(_State(), directory, keep=2).restore(directory)
    assert (directory / "ckpt-4.npz").is_file()  # left as it is
