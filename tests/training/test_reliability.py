"""Resume after SIGKILL, clean stop on SIGTERM, divergence detection, and continuity of a resumed run."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from acgan.config import Config
from acgan.errors import UserError
from acgan.model import precision
from acgan.step import losses, tf_step
from acgan.training import loop
from acgan.training.health import DivergenceMonitor
from api_runs import newest_checkpoint_step

TINY = [
    "--batch",
    "16",
    "--width",
    "0.125",
    "--no-jit",
    "--sample_every",
    "1000",
    "--warmup_steps",
    "0",
]


def _train(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.Popen(
        [sys.executable, "-m", "acgan.train", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_checkpoint(run_dir, proc, at_least, timeout=240):
    deadline = time.time() + timeout
    while time.time() < deadline:
        step = newest_checkpoint_step(run_dir)
        if step is not None and step >= at_least:
            return step
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.2)
    raise AssertionError("no checkpoint appeared")


@pytest.mark.slow
def test_sigkill_then_resume_continues_from_the_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    args = [
        "--policy",
        "mixed_float16",
        "--output_dir",
        str(run_dir),
        "--checkpoint_every",
        "3",
        *TINY,
    ]
    proc = _train("--steps", "100000", *args)
    _wait_for_checkpoint(run_dir, proc, at_least=6)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = newest_checkpoint_step(run_dir)
    saved = tf.train.load_checkpoint(str(run_dir / "checkpoints" / f"ckpt-{killed_at}"))
    scales = {
        n: float(saved.get_tensor(f"gan/{n}_optimizer/dynamic_scale/.ATTRIBUTES/VARIABLE_VALUE"))
        for n in "dgq"
    }
    sessions = json.loads(saved.get_tensor("history/sessions_json/.ATTRIBUTES/VARIABLE_VALUE"))

    resumed = _train("--steps", str(killed_at + 2), "--resume", "--output_dir", str(run_dir))
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err[-3000:]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "completed" and report["steps"] == killed_at + 2
    assert report["resumed_from"]["step"] == killed_at
    assert report["resumed_from"]["loss_scales"] == scales
    # Each session keeps its own timing: the killed one as of its last checkpoint, listed apart; the
    # figures are the resumed session's alone (2 steps, less its compile step; no warm-up here).
    assert report["earlier_sessions"] == sessions and sessions[0]["end_step"] == killed_at
    # steps 2..killed_at-1: the compile step is left out, and the checkpointed step's interval was still open
    assert sessions[0]["timing"]["measured_steps"] == killed_at - 2
    assert report["timing"]["measured_steps"] == 1
    assert len(report["compile_seconds_per_session"]) == 2
    # taken from the saved run, not the defaults
    assert report["config"]["policy"] == "mixed_float16"
    assert newest_checkpoint_step(run_dir) == killed_at + 2


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_and_the_report(tmp_path):
    run_dir = tmp_path / "run"
    proc = _train(
        "--steps", "100000", "--checkpoint_every", "1000", "--output_dir", str(run_dir), *TINY
    )
    deadline = time.time() + 240
    while not list((run_dir / "tensorboard").glob("events*")) and time.time() < deadline:
        assert proc.poll() is None
        time.sleep(0.2)
    time.sleep(3)  # a few steps in
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "stopped by SIGTERM" in err and "Traceback" not in err
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "interrupted"
    assert newest_checkpoint_step(run_dir) == report["steps"] > 0
    assert (run_dir / "samples" / "final.png").is_file()


def _config(tmp_path, **overrides):
    values = dict(
        batch=16,
        width=0.125,
        jit=False,
        sample_every=None,
        checkpoint_every=2,
        warmup_steps=0,
        output_dir=str(tmp_path / "run"),
        data_dir=str(tmp_path.parent / "data"),
    )
    values.update(overrides)
    return Config(**values)


def _weights(run_dir):
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(run_dir / "checkpoints")))
    # The models' variables, under whichever of the step's attributes tracked each first (gan/models,
    # gan/d_variables, gan/g_statistics, ...): all of gan/ but the optimizers and the step counter.
    keys = sorted(
        k
        for k in reader.get_variable_to_shape_map()
        if k.startswith("gan/") and "optimizer" not in k and not k.startswith("gan/step")
    )
    return {k: reader.get_tensor(k) for k in keys}


@pytest.mark.slow
def test_resumed_run_matches_an_uninterrupted_one(tmp_path, set_policy):
    set_policy("float32")
    straight = loop.run(_config(tmp_path / "a", steps=6))
    first = loop.run(_config(tmp_path / "b", steps=4))
    resumed = loop.run(_config(tmp_path / "b", steps=6, resume=True))
    assert (straight.status, first.status, resumed.status) == ("completed",) * 3
    a, b = _weights(straight.run_dir), _weights(resumed.run_dir)
    assert a.keys() == b.keys() and len(a) > 10
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-4, atol=1e-5, err_msg=key)


@pytest.mark.slow
def test_same_seed_gives_the_same_first_steps(tmp_path, set_policy):
    set_policy("float32")
    one = loop.run(_config(tmp_path / "a", steps=2))
    two = loop.run(_config(tmp_path / "b", steps=2))
    other = loop.run(_config(tmp_path / "c", steps=2, seed=1))
    m1, m2, m3 = (
        json.loads((r.run_dir / "report.json").read_text())["final_metrics"]
        for r in (one, two, other)
    )
    assert m1["d_loss"] == pytest.approx(m2["d_loss"], rel=1e-5)
    assert m1["q_loss"] == pytest.approx(m2["q_loss"], rel=1e-5)
    assert m1["d_loss"] != pytest.approx(m3["d_loss"], rel=1e-5)


@pytest.mark.slow
def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, set_policy, monkeypatch):
    set_policy("float32")
    config = _config(tmp_path, steps=4)
    loop.run(config)
    honest_bce = losses.bce
    monkeypatch.setattr(
        losses, "bce", lambda target, logits: honest_bce(target, logits) * np.float32("nan")
    )
    result = loop.run(dataclasses.replace(config, steps=10, resume=True, log_every=1))
    assert result.status == "diverged"
    assert "d loss is nan at step 5" in result.message
    assert newest_checkpoint_step(result.run_dir) == 4
    report = json.loads((result.run_dir / "report.json").read_text())
    assert report["status"] == "diverged" and report["message"] == result.message


@pytest.mark.parametrize(
    "log_every,checkpoint_every,expected,last_checkpoint",
    [
        (1, 2, "q_optimizer skipped 4 steps in a row at step 4", 2),
        # Reads 5 steps apart: the device counts the skips in a row between them.
        (5, 100, "q_optimizer skipped 5 steps in a row at step 5", None),
    ],
)
@pytest.mark.slow
def test_endless_float16_skips_stop_the_run(
    tmp_path, set_policy, monkeypatch, log_every, checkpoint_every, expected, last_checkpoint
):
    set_policy("mixed_float16")
    honest = precision.scale_loss

    def overflowing(optimizer, loss):
        scaled = honest(optimizer, loss)
        return scaled * np.float32("inf") if "q_optimizer" in optimizer.name else scaled

    monkeypatch.setattr(tf_step.precision, "scale_loss", overflowing)
    result = loop.run(
        _config(
            tmp_path,
            policy="mixed_float16",
            steps=50,
            max_skipped_in_a_row=3,
            log_every=log_every,
            checkpoint_every=checkpoint_every,
        )
    )
    assert result.status == "diverged"
    assert result.message.startswith(expected)
    assert newest_checkpoint_step(result.run_dir) == last_checkpoint


@pytest.mark.slow
def test_reads_far_apart_still_never_checkpoint_a_non_finite_step(
    tmp_path, set_policy, monkeypatch
):
    """Metrics read every 7 steps: the NaN from step 5 is caught by the read before step 6's checkpoint."""
    set_policy("float32")
    honest_bce, calls = losses.bce, tf.Variable(0)

    def nan_from_step_5(target, logits):  # three BCE terms per step: D's two, G's one
        calls.assign_add(1)
        return honest_bce(target, logits) * tf.where(calls > 12, np.float32("nan"), np.float32(1))

    monkeypatch.setattr(losses, "bce", nan_from_step_5)
    result = loop.run(_config(tmp_path, steps=20, log_every=7))
    assert result.status == "diverged"
    assert "d loss is nan at step 6" in result.message
    assert newest_checkpoint_step(result.run_dir) == 4


def test_monitor_reads_scale_below_one_as_divergence():
    monitor = DivergenceMonitor(loss_scaled=True, max_skipped_in_a_row=20)
    metrics = {f"{n}_{k}": 0.0 for n in "dgq" for k in ("skipped",)}
    metrics.update(
        {
            "d_loss": 1.0,
            "g_loss": 1.0,
            "q_loss": 1.0,
            "d_loss_scale": 2.0,
            "g_loss_scale": 0.5,
            "q_loss_scale": 2.0,
        }
    )
    assert "g_optimizer's loss scale fell to 0.5 at step 7" in monitor.check(7, metrics)


@pytest.mark.slow
def test_resume_refuses_a_different_model_and_an_empty_folder(tmp_path, set_policy):
    set_policy("float32")
    config = _config(tmp_path, steps=2)
    loop.run(config)
    before = (tmp_path / "run" / "report.json").read_text()
    with pytest.raises(UserError, match=r"different model config \(--width 0.125 -> 0.25\)"):
        loop.run(dataclasses.replace(config, width=0.25, steps=4))
    # Its checkpoints hold G's average or not, so the decay is the model's too.
    with pytest.raises(UserError, match=r"different model config \(--ema_decay 0.0 -> 0.999\)"):
        loop.run(dataclasses.replace(config, ema_decay=0.999, steps=4))
    with pytest.raises(UserError, match="already reached step 2"):
        loop.run(dataclasses.replace(config, resume=True))
    with pytest.raises(UserError, match="nothing to resume"):
        loop.run(dataclasses.replace(config, output_dir=str(tmp_path / "empty"), resume=True))
    assert (tmp_path / "run" / "report.json").read_text() == before
