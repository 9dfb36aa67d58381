"""The trainer on JAX over several devices: --strategy on JAX (validation), a run that moves from one
device to four and back (virtual CPU devices, XLA_FLAGS), and the one-line errors. A run on several
devices or processes, or one whose error is how a process ends, is a child process (jax_train_runner.py,
where TensorFlow cannot be imported either); this process has one CPU device and trains on it (the resumes
on one device among them). Sizes: the smallest model (width 0.125) at batch 16, which splits over 2 and 4
devices, and a few steps: a child's cost is importing JAX and compiling its step, so the runs share
settings, and the compilation cache gives a later process the step an earlier one compiled."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import acgan
from acgan.config import Config
from acgan.errors import LOST_WORKER_STATUS, USER_ERROR_STATUS, UserError
from api_runs import FAST_XLA

RUNNER = Path(__file__).with_name("jax_train_runner.py")
ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "--batch",
    "16",
    "--width",
    "0.125",
    "--warmup_steps",
    "1",
    "--log_every",
    "2",
    "--max_per_class",
    "20",
    "--sample_every",
    "1000",
]
TINY_SETTINGS = dict(
    batch=16, width=0.125, warmup_steps=1, log_every=2, max_per_class=20, sample_every=1000
)
FOUR = "--xla_force_host_platform_device_count=4"


def _train_jax(*args, xla_flags=None, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2", JAX_PLATFORMS="cpu")
    env.pop("KERAS_BACKEND", None)
    env["XLA_FLAGS"] = " ".join(f for f in (FAST_XLA, xla_flags) if f)
    done = subprocess.run(
        [sys.executable, str(RUNNER), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert "tensorflow imports attempted: []" in done.stderr, done.stderr[-3000:]
    return done


def _error_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_strategies_on_jax_validate():
    for strategy in ("auto", "default", "mirrored", "multi_worker"):
        Config(backend="jax", strategy=strategy).validate()
    with pytest.raises(UserError, match="--strategy tpu is TensorFlow's"):
        Config(backend="jax", strategy="tpu").validate()
    Config(
        backend="jax",
        strategy="multi_worker",
        coordinator_address="localhost:1234",
        num_processes=2,
        process_id=1,
    ).validate()
    with pytest.raises(
        UserError, match="--process_id applies to --backend jax --strategy multi_worker"
    ):
        Config(backend="jax", strategy="mirrored", process_id=0).validate()
    with pytest.raises(UserError, match="--process_id 2 must be below --num_processes 2"):
        Config(backend="jax", strategy="multi_worker", num_processes=2, process_id=2).validate()


@pytest.mark.slow
def test_a_run_moves_from_one_device_to_four_and_back(tmp_path):
    """1 device (steps 1-2), 4 (3-8, the mirrored strategy), 1 again (9-10): checkpoints are full arrays,
    so a resume reads them on any number of devices, and the run reaches the step asked for."""
    run_dir = tmp_path / "run"
    common = ["--output_dir", str(run_dir), "--checkpoint_every", "2", *TINY]
    one_device = dict(
        backend="jax",
        strategy="default",
        output_dir=str(run_dir),
        checkpoint_every=2,
        **TINY_SETTINGS,
    )
    assert acgan.train(steps=2, **one_device).status == "completed"  # in this process

    done = _train_jax("--strategy", "mirrored", "--steps", "8", *common, xla_flags=FOUR)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "strategy mirrored: 4 replicas on 1 worker(s), 4 samples each; XLA: step" in done.stdout
    report = json.loads((run_dir / "report.json").read_text())
    layout = report["distribution"]
    assert (layout["strategy"], layout["replicas"], layout["workers"]) == ("mirrored", 4, 1)
    assert (
        layout["replica_devices"] == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]
        and layout["synchronized_batch_norm"]
    )
    assert report["resumed_from"]["step"] == 2 and report["steps"] == 8
    timing = report["timing"]
    assert timing["replicas"] == 4
    assert timing["samples_per_second_per_replica"] == pytest.approx(
        timing["samples_per_second"] / 4
    )
    assert report["cost"]["priced_units"] == 4  # every device counts
    assert (
        "mirrored: 4 replica(s) (cpu:0, cpu:1, cpu:2, cpu:3), batch norm synchronized"
        in (run_dir / "report.md").read_text()
    )

    assert acgan.train(steps=10, **one_device).status == "completed"
    report = json.loads((run_dir / "report.json").read_text())
    assert (
        report["status"] == "completed"
        and report["steps"] == 10
        and report["resumed_from"]["step"] == 8
    )
    assert report["distribution"]["replicas"] == 1
    assert [
        (e["start_step"], e["end_step"], e["replicas"]) for e in report["earlier_sessions"]
    ] == [(0, 2, 1), (2, 8, 4)]


@pytest.mark.slow
def test_a_global_batch_that_does_not_split_evenly_is_one_line(tmp_path):
    # --devices splits the host CPU into three (jax_num_cpu_devices), as TensorFlow's --devices does.
    done = _train_jax(
        "--strategy",
        "mirrored",
        "--devices",
        "cpu:0,cpu:1,cpu:2",
        "--steps",
        "2",
        "--output_dir",
        str(tmp_path / "run"),
        *TINY,
    )
    assert done.returncode == USER_ERROR_STATUS
    assert _error_lines(done.stderr) == [
        "error: --batch 16 does not divide by the 3 replicas; use a multiple of 3 "
        "(it is the global batch)"
    ]
    assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()


@pytest.mark.slow
def test_multi_worker_without_a_coordinator_is_one_line(tmp_path):
    done = _train_jax(
        "--strategy", "multi_worker", "--steps", "2", "--output_dir", str(tmp_path / "run"), *TINY
    )
    assert done.returncode == USER_ERROR_STATUS
    lines = _error_lines(done.stderr)
    assert (
        len(lines) == 1
        and "jax.distributed.initialize failed" in lines[0]
        and "--coordinator_address" in lines[0]
    )
    assert lines[0].endswith(
        "or resume a multi_worker run on this one process with --strategy default"
    )
    assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()


def test_a_process_reads_only_its_rows_of_each_global_batch():
    import numpy as np

    from acgan.data.batches import BatchPlan, training_batch
    from acgan.data.image_set import ImageSet

    rng = np.random.default_rng(0)
    data = ImageSet(
        rng.integers(0, 256, (23, 8, 8, 1), dtype=np.uint8),
        rng.integers(0, 3, 23).astype(np.int32),
        ["a", "b", "c"],
    )
    plan = BatchPlan(len(data), 8, 7, noise_dim=4, num_classes=3)
    for step in (0, 2, 5):  # step 2 straddles two epochs
        whole = training_batch(data, plan, step)
        shares = [training_batch(data, plan, step, rows=slice(4 * p, 4 * p + 4)) for p in range(2)]
        for i, array in enumerate(whole):
            np.testing.assert_array_equal(np.concatenate([share[i] for share in shares]), array)


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_train_one_run_together(tmp_path):
    """Two localhost processes (jax.distributed, CPU collectives), one CPU device each, train one run:
    process 0 writes its files, process 1 none, and the weights are bit for bit those of one process
    training on two devices (the same global batches, split the same way)."""
    run_dir, port = tmp_path / "run", _free_port()
    common = ["--steps", "6", "--checkpoint_every", "3", "--sample_every", "3", *TINY[:-2]]
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2", JAX_PLATFORMS="cpu")
    env.pop("KERAS_BACKEND", None)
    env["XLA_FLAGS"] = FAST_XLA
    # One process on two devices first: the two processes then find its step in the compilation cache
    # rather than both compiling it at once.
    done = _train_jax(
        "--strategy",
        "mirrored",
        "--devices",
        "cpu:0,cpu:1",
        "--output_dir",
        str(tmp_path / "one"),
        *common,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # Process 0 told by flags, process 1 by the environment (JAX's JAX_COORDINATOR_ADDRESS, acgan's other two).
    where = [
        ["--coordinator_address", f"localhost:{port}", "--num_processes", "2", "--process_id", "0"],
        [],
    ]
    envs = [
        env,
        dict(
            env,
            JAX_COORDINATOR_ADDRESS=f"localhost:{port}",
            JAX_NUM_PROCESSES="2",
            JAX_PROCESS_ID="1",
        ),
    ]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(RUNNER),
                "--strategy",
                "multi_worker",
                *where[i],
                "--output_dir",
                str(run_dir),
                *common,
            ],
            env=envs[i],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        for i in range(2)
    ]
    try:
        outputs = [proc.communicate(timeout=300) for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    for proc, (_, err) in zip(procs, outputs):
        assert proc.returncode == 0, err[-3000:]
    assert "run folder:" in outputs[0][0] and "worker done" in outputs[1][0]
    fingerprints = {
        line.split()[-1]
        for out, _ in outputs
        for line in out.splitlines()
        if line.startswith("weights fingerprint:")
    }
    assert len(fingerprints) == 1
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "completed" and report["steps"] == 6
    layout = report["distribution"]
    assert (layout["strategy"], layout["replicas"], layout["workers"]) == ("multi_worker", 2, 2)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "ckpt-3.npz",
        "ckpt-6.npz",
    ]
    assert len(list((run_dir / "tensorboard").iterdir())) == 1  # one writer
    assert not list(tmp_path.glob("outputs"))  # process 1 made no folder of its own
    assert (
        json.loads((tmp_path / "one" / "report.json").read_text())["weights_fingerprint"]
        == fingerprints.pop()
    )


@pytest.mark.slow
@pytest.mark.parametrize("victim", [1, 0])
def test_a_lost_process_is_one_line_with_its_own_status_and_the_run_resumes_on_one_process(
    tmp_path, victim
):
    """SIGKILL to one process once the first checkpoint is written; the other ends with one line, exit status 5,
    and the run resumes on one process with --strategy default. Process 1 lost: process 0's next collective
    (Gloo) fails, and as the chief it says the step and writes the report. Process 0 lost (the coordinator):
    JAX aborts process 1's training child at once, and its parent (jax_supervisor.py) says what was lost."""
    run_dir, port = tmp_path / "run", _free_port()
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        TF_CPP_MIN_LOG_LEVEL="2",
        JAX_PLATFORMS="cpu",
        XLA_FLAGS=FAST_XLA,
    )
    env.pop("KERAS_BACKEND", None)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(RUNNER),
                "--strategy",
                "multi_worker",
                "--coordinator_address",
                f"localhost:{port}",
                "--num_processes",
                "2",
                "--process_id",
                str(i),
                "--output_dir",
                str(run_dir),
                "--steps",
                "100000",
                "--checkpoint_every",
                "2",
                *TINY,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        for i in range(2)
    ]
    survivor = procs[1 - victim]
    try:
        deadline, checkpoints = time.time() + 240, run_dir / "checkpoints"
        while not (checkpoints.is_dir() and any(checkpoints.glob("ckpt-*.npz"))):
            assert time.time() < deadline and all(p.poll() is None for p in procs), (
                "no checkpoint appeared"
            )
            time.sleep(0.2)
        procs[victim].kill()  # the process started: its training child dies with it
        _, err = survivor.communicate(timeout=120)
    finally:
        for proc in procs:
            proc.kill()
    assert survivor.returncode == LOST_WORKER_STATUS and "Traceback" not in err, err[-3000:]
    [line] = _error_lines(err)
    resume = (
        f"resume on one process with python -m acgan.train --resume --output_dir {run_dir} --strategy default, "
        "or start every process again with --resume"
    )
    if victim == 1:
        report = json.loads((run_dir / "report.json").read_text())
        step, checkpoint = report["steps"], report["last_checkpoint"]
        assert report["status"] == "lost_worker" and report["lost"].startswith("process 1 (")
        assert line == (
            f"error: lost {report['lost']} of this multi_worker run after step {step}; the last intact "
            f"checkpoint is {checkpoint}; {resume}"
        )
    else:  # the chief is gone, with the report it would have written
        assert not (run_dir / "report.json").exists()
        checkpoint = line.split("the last intact checkpoint is ")[1].split(";")[0]
        assert (
            line
            == f"error: lost process 0 (the coordinator) of this multi_worker run; the last intact "
            f"checkpoint is {checkpoint}; {resume}"
        )
    resumed_step = int(checkpoint.removesuffix(".npz").split("-")[-1])
    # The resume the line asks for, in this process (one device, as --strategy default is): the process
    # boundary was the lost peer's, not the resume's. Its data folder is the processes' (their cwd's data/).
    run = acgan.train(
        resume=True,
        output_dir=str(run_dir),
        strategy="default",
        steps=resumed_step + 2,
        data_dir=str(tmp_path / "data"),
    )
    assert run.status == "completed", run.message
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "completed" and report["steps"] == resumed_step + 2
    assert report["resumed_from"]["step"] == resumed_step


def test_a_resume_drops_the_old_devices_for_a_new_strategy_and_never_takes_a_saved_process_id(
    tmp_path,
):
    from acgan.training.run_dir import config_to_resume

    saved = Config(
        backend="jax", strategy="mirrored", devices=("cpu:0", "cpu:1"), output_dir=str(tmp_path)
    )
    (tmp_path / "config.json").write_text(saved.to_json())
    config = config_to_resume(
        Config(strategy="default", output_dir=str(tmp_path)), {"strategy", "output_dir"}
    )
    assert (config.backend, config.strategy, config.devices) == ("jax", "default", None)
    config.validate()

    saved = Config(
        backend="jax",
        strategy="multi_worker",
        coordinator_address="host0:1234",
        num_processes=2,
        process_id=0,
        output_dir=str(tmp_path),
    )
    (tmp_path / "config.json").write_text(saved.to_json())
    # e.g. process 1, told by env
    config = config_to_resume(Config(output_dir=str(tmp_path)), {"output_dir"})
    assert config.strategy == "multi_worker" and (
        config.coordinator_address,
        config.num_processes,
        config.process_id,
    ) == (None, None, None)
