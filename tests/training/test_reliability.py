"""Resume after SIGKILL, clean stop on SIGTERM, divergence detection, and continuity of a resumed run.

A `python -m acgan.train` process runs only for the signals (SIGKILL, SIGTERM: a process's); the run that
resumes after a SIGKILL, and every other run, trains in this process (acgan.train, loop.run). The float32
runs that several tests read are made once (`runs`) and copied where a test writes on. Sizes: width 0.125,
batch 16, eager steps, a checkpoint every 2 (every 3 for the SIGKILL): what is tested is what a run keeps
and restores, which a few steps show."""

import dataclasses
import json
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import acgan
from acgan.config import Config
from acgan.errors import UserError
from acgan.model import precision
from acgan.step import losses, tf_step
from acgan.training import loop
from acgan.training.health import divergence
from api_runs import child_env, newest_checkpoint_step

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
    return subprocess.Popen(
        [sys.executable, "-m", "acgan.train", *[str(a) for a in args]],
        env=child_env(),
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


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, data_dir_with_doodles):
    return data_dir_with_doodles(tmp_path_factory.mktemp("reliability-data"))


@pytest.mark.slow
def test_sigkill_then_resume_continues_from_the_checkpoint(tmp_path, data_dir, set_policy):
    """Killed after its checkpoint at step 3 or later; resumed by acgan.train in this process."""
    run_dir = tmp_path / "run"
    args = [
        "--policy",
        "mixed_float16",
        "--output_dir",
        run_dir,
        "--data_dir",
        data_dir,
        "--checkpoint_every",
        "3",
        *TINY,
    ]
    proc = _train("--steps", "100000", *args)
    _wait_for_checkpoint(run_dir, proc, at_least=3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = newest_checkpoint_step(run_dir)
    saved = tf.train.load_checkpoint(str(run_dir / "checkpoints" / f"ckpt-{killed_at}"))
    scales = {
        n: float(saved.get_tensor(f"gan/{n}_optimizer/dynamic_scale/.ATTRIBUTES/VARIABLE_VALUE"))
        for n in "dgq"
    }
    sessions = json.loads(saved.get_tensor("history/sessions_json/.ATTRIBUTES/VARIABLE_VALUE"))

    resumed = acgan.train(steps=killed_at + 2, resume=True, output_dir=str(run_dir))
    assert resumed.status == "completed", resumed.message
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
def test_sigterm_saves_a_checkpoint_and_the_report(tmp_path, data_dir):
    """Stopped once its first step's metrics are in TensorBoard (--log_every 1), so a step or more in."""
    run_dir = tmp_path / "run"
    proc = _train(
        "--steps",
        "100000",
        "--checkpoint_every",
        "1000",
        "--log_every",
        "1",
        "--output_dir",
        run_dir,
        "--data_dir",
        data_dir,
        *TINY,
    )
    deadline = time.time() + 240
    while time.time() < deadline and not any(
        b"d_loss" in events.read_bytes() for events in (run_dir / "tensorboard").glob("events*")
    ):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "stopped by SIGTERM" in err and "Traceback" not in err
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "interrupted"
    assert newest_checkpoint_step(run_dir) == report["steps"] > 0
    assert (run_dir / "samples" / "final.png").is_file()


def _config(tmp_path, data_dir, **overrides):
    values = dict(
        batch=16,
        width=0.125,
        jit=False,
        sample_every=None,
        checkpoint_every=2,
        warmup_steps=0,
        output_dir=str(tmp_path / "run"),
        data_dir=str(data_dir),
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


def _final_metrics(report_text):
    return json.loads(report_text)["final_metrics"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data_dir):
    """The float32 runs (loop.run in this process) that the tests below read, or copy to write on:
    straight: 4 steps at once (ckpt-2, ckpt-4), its metrics read at every step; halves: 2 steps, then
    resumed to 4 (its report and folder at step 2 kept as first_report and at_2); other_seed: 2 steps of
    seed 1. Their configs under "config"."""
    folder = tmp_path_factory.mktemp("reliability-runs")
    with precision.float32_policy():
        made = {"config": {}}
        for name, settings in (
            ("straight", dict(steps=4, log_every=1)),
            ("halves", dict(steps=2)),
            ("other_seed", dict(steps=2, seed=1)),
        ):
            config = _config(folder / name, data_dir, **settings)
            result = loop.run(config)
            assert result.status == "completed", result.message
            made[name], made["config"][name] = result.run_dir, config
            if name == "halves":
                made["first_report"] = (result.run_dir / "report.json").read_text()
                made["at_2"] = shutil.copytree(result.run_dir, folder / "halves-at-2")
                resumed = loop.run(dataclasses.replace(config, steps=4, resume=True))
                assert resumed.status == "completed", resumed.message
    return made


def _copy(run_dir, to):
    """A copy of a run folder, to train on."""
    return shutil.copytree(run_dir, to / "run")


@pytest.mark.slow
def test_resumed_run_matches_an_uninterrupted_one(runs):
    a, b = _weights(runs["straight"]), _weights(runs["halves"])
    assert json.loads((runs["halves"] / "report.json").read_text())["resumed_from"]["step"] == 2
    assert a.keys() == b.keys() and len(a) > 10
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-4, atol=1e-5, err_msg=key)


def _logged_at(run_dir, step):
    """The metrics a run logged to TensorBoard at `step`: what its report's final_metrics holds for its
    last step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return {
        tag: value
        for tag in events.Tags()["scalars"]
        for event_step, value in ((e.step, e.value) for e in events.Scalars(tag))
        if event_step == step
    }


@pytest.mark.slow
def test_same_seed_gives_the_same_first_steps(runs):
    """Two runs of seed 0 at step 2 (the halves' first session's last metrics, and the straight run's
    logged at step 2), and one of seed 1."""
    m1 = _final_metrics(runs["first_report"])
    m2 = _logged_at(runs["straight"], 2)
    m3 = _final_metrics((runs["other_seed"] / "report.json").read_text())
    assert m1["d_loss"] == pytest.approx(m2["d_loss"], rel=1e-5)
    assert m1["q_loss"] == pytest.approx(m2["q_loss"], rel=1e-5)
    assert m1["d_loss"] != pytest.approx(m3["d_loss"], rel=1e-5)


@pytest.mark.slow
def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, runs, set_policy, monkeypatch):
    """From a copy of the straight run (4 steps, ckpt-4)."""
    set_policy("float32")
    run_dir = _copy(runs["straight"], tmp_path)
    config = dataclasses.replace(runs["config"]["straight"], output_dir=str(run_dir))
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
    tmp_path,
    data_dir,
    set_policy,
    monkeypatch,
    log_every,
    checkpoint_every,
    expected,
    last_checkpoint,
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
            data_dir,
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
    tmp_path, data_dir, set_policy, monkeypatch
):
    """Metrics read every 7 steps: the NaN from step 5 is caught by the read before step 6's checkpoint."""
    set_policy("float32")
    honest_bce, calls = losses.bce, tf.Variable(0)

    def nan_from_step_5(target, logits):  # three BCE terms per step: D's two, G's one
        calls.assign_add(1)
        return honest_bce(target, logits) * tf.where(calls > 12, np.float32("nan"), np.float32(1))

    monkeypatch.setattr(losses, "bce", nan_from_step_5)
    result = loop.run(_config(tmp_path, data_dir, steps=20, log_every=7))
    assert result.status == "diverged"
    assert "d loss is nan at step 6" in result.message
    assert newest_checkpoint_step(result.run_dir) == 4


def test_monitor_reads_scale_below_one_as_divergence():
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
    assert "g_optimizer's loss scale fell to 0.5 at step 7" in divergence(
        7, metrics, loss_scaled=True, max_skipped_in_a_row=20
    )


@pytest.mark.slow
def test_resume_refuses_a_different_model_and_an_empty_folder(tmp_path, runs, set_policy):
    """On a copy of the halves' run at step 2."""
    set_policy("float32")
    run_dir = _copy(runs["at_2"], tmp_path)
    config = dataclasses.replace(runs["config"]["halves"], output_dir=str(run_dir))
    before = (run_dir / "report.json").read_text()
    with pytest.raises(UserError, match=r"different model config \(--width 0.125 -> 0.25\)"):
        loop.run(dataclasses.replace(config, width=0.25, steps=4))
    # Its checkpoints hold G's average or not, so the decay is the model's too.
    with pytest.raises(UserError, match=r"different model config \(--ema_decay 0.0 -> 0.999\)"):
        loop.run(dataclasses.replace(config, ema_decay=0.999, steps=4))
    with pytest.raises(UserError, match="already reached step 2"):
        loop.run(dataclasses.replace(config, resume=True))
    with pytest.raises(UserError, match="nothing to resume"):
        loop.run(dataclasses.replace(config, output_dir=str(tmp_path / "empty"), resume=True))
    assert (run_dir / "report.json").read_text() == before
