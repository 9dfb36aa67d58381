"""Faults made for real on acgan.train runs: damaged checkpoints, a full disk, two processes on one run
folder, a stale lock from a SIGKILLed process. After each: no traceback, one clear line, the documented
exit status, and a resume that reaches the requested step.

A `python -m acgan.train` process runs only where the process is what is tested: the run holding the lock
that another refuses and that is then SIGKILLed, and the run stopped by its own file-size limit (a process
limit: past it the kernel sends SIGXFSZ, which the command ignores). The other runs go through the train
command's main in this process (cli.run_main: its one-line errors and exit statuses), from copies of one
module run (`trained`, 6 steps). Sizes: width 0.125, batch 16, eager steps, two steps a checkpoint: the
faults need a few checkpoints, not learning."""

import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from acgan.errors import DISK_FULL_STATUS, USER_ERROR_STATUS, UserError
from acgan.training import checkpoints
from api_runs import child_env, newest_checkpoint_step, train_command_in_process

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


def _train(data_dir, *args, preexec_fn=None):
    """`python -m acgan.train ARGS` in a child process, on the doodles of `data_dir`."""
    return subprocess.Popen(
        [sys.executable, "-m", "acgan.train", *args, *TINY, "--data_dir", str(data_dir)],
        env=child_env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=preexec_fn,
    )


def _finish(proc, timeout=300):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def _error_lines(err):
    return [line for line in err.splitlines() if line.startswith("error:")]


class Command:
    """The train command in this process (api_runs.train_command_in_process) on one data folder."""

    def __init__(self, data_dir, monkeypatch, capsys):
        self.data_dir, self.monkeypatch, self.capsys = data_dir, monkeypatch, capsys

    def __call__(self, *args):
        """(exit status, stdout, stderr)."""
        argv = [*args, *TINY, "--data_dir", self.data_dir]
        return train_command_in_process(argv, self.monkeypatch, self.capsys)

    def ok(self, run_dir, args, steps):
        code, out, err = self("--steps", steps, "--output_dir", run_dir, *args)
        assert code == 0, err[-3000:]
        assert "Traceback" not in err
        report = json.loads((run_dir / "report.json").read_text())
        assert report["status"] == "completed" and report["steps"] == steps
        return report, out, err


@pytest.fixture
def command(data_dir, monkeypatch, capsys):
    return Command(data_dir, monkeypatch, capsys)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, data_dir_with_doodles):
    return data_dir_with_doodles(tmp_path_factory.mktemp("faults-data"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory, data_dir):
    """One run of 6 steps (ckpt-2, ckpt-4, ckpt-6) through the train command in this process; a test copies
    it to start from."""
    run_dir = tmp_path_factory.mktemp("faults-trained") / "run"
    with pytest.MonkeyPatch.context() as patch:
        Command(data_dir, patch, _Discard()).ok(run_dir, ["--checkpoint_every", "2"], steps=6)
    return run_dir


class _Discard:
    """capsys's readouterr for a module fixture (capsys is per test): the command's output, unread."""

    def readouterr(self):
        return "", ""


def _copy(run, to):
    shutil.copytree(run, to)
    return to


def _overwrite_with_noise(path, start=64, length=4096):
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(os.urandom(length))


@pytest.mark.slow
def test_damaged_checkpoints_resume_from_the_newest_intact_one(tmp_path, trained, command):
    run_dir = _copy(trained, tmp_path / "run")  # ckpt-2, ckpt-4, ckpt-6
    ckpts = run_dir / "checkpoints"
    data6 = ckpts / "ckpt-6.data-00000-of-00001"
    os.truncate(data6, data6.stat().st_size // 2)  # a crash mid-copy
    _overwrite_with_noise(ckpts / "ckpt-4.data-00000-of-00001")  # a bad disk

    report, _, err = command.ok(run_dir, ["--resume"], steps=8)
    warnings = [line for line in err.splitlines() if line.startswith("warning: checkpoint")]
    assert len(warnings) == 2, err[-3000:]
    assert "ckpt-6.data-00000-of-00001" in warnings[0] and "resuming from ckpt-2" in warnings[0]
    assert "ckpt-4.data-00000-of-00001" in warnings[1] and "Checksum does not match" in warnings[1]
    assert report["resumed_from"]["step"] == 2 and report["resumed_from"]["checkpoint"].endswith(
        "ckpt-2"
    )
    # Kept for inspection, and no longer listed anywhere TensorFlow or a resume would look.
    damaged = sorted(p.name for p in (ckpts / "damaged").iterdir())
    assert damaged == [
        "ckpt-4.data-00000-of-00001",
        "ckpt-4.index",
        "ckpt-6.data-00000-of-00001",
        "ckpt-6.index",
    ]
    # The resumed run wrote steps 4, 6 and 8 afresh, and --keep_checkpoints 3 swept ckpt-2.
    state = tf.train.get_checkpoint_state(str(ckpts))
    assert [checkpoints.step_of(p) for p in state.all_model_checkpoint_paths] == [4, 6, 8]
    assert sorted(p.name for p in ckpts.glob("ckpt-*.index")) == [
        "ckpt-4.index",
        "ckpt-6.index",
        "ckpt-8.index",
    ]

    # None intact: one line, exit status 2, nothing moved.
    os.truncate(ckpts / "ckpt-8.index", 100)
    _overwrite_with_noise(ckpts / "ckpt-6.index", start=0, length=9000)
    data4 = ckpts / "ckpt-4.data-00000-of-00001"
    os.truncate(data4, data4.stat().st_size - 10)
    before = sorted(p.name for p in ckpts.rglob("*"))
    code, out, err = command("--steps", "10", "--resume", "--output_dir", run_dir)
    assert code == USER_ERROR_STATUS and "Traceback" not in err
    [line] = _error_lines(err)
    assert "no intact checkpoint" in line
    assert (
        "ckpt-8.index" in line and "ckpt-6.index" in line and "ckpt-4.data-00000-of-00001" in line
    )
    assert sorted(p.name for p in ckpts.rglob("*")) == before


def _mount_tmpfs(path, size):
    path.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            check=True,
            capture_output=True,
            timeout=30,
        )
        return True
    except (OSError, subprocess.SubprocessError):
        return False


def _unmount(path):
    """Unmounts a test's tmpfs; lazily if something still holds a file there."""
    if subprocess.run(["umount", str(path)], capture_output=True, timeout=60).returncode:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=60)


def _file_size_limit(limit):
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.slow
@pytest.mark.parametrize("how", ["tmpfs", "file_size_limit"])
def test_a_full_disk_stops_clearly_and_keeps_the_last_checkpoint(
    tmp_path, how, trained, data_dir, command
):
    """The run from ckpt-6 to 8 fails to write ckpt-8. On a full tmpfs it runs in this process; under a
    file-size limit it is a process of its own, as the limit is a process's (and the command must ignore
    the SIGXFSZ that would kill it), so that one also shows the exit status of the command itself."""
    mount = tmp_path / "disk"
    if how == "tmpfs" and not _mount_tmpfs(mount, "32m"):
        pytest.skip("cannot mount a tmpfs here (not root?); the file-size limit variant covers it")
    mount.mkdir(exist_ok=True)
    try:
        run_dir = _copy(trained, mount / "run")  # ckpt-2, ckpt-4, ckpt-6
        ckpts = run_dir / "checkpoints"
        args = ["--steps", "8", "--resume", "--output_dir", run_dir]
        if how == "tmpfs":
            # fill the disk but for 128 KiB: enough for the small files, not a checkpoint
            free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
            with open(mount / "filler", "wb") as f:
                f.write(b"\0" * (free - 128 * 1024))
            code, out, err = command(*args)
        else:  # each file at most 1 MiB: a checkpoint's data (~4 MiB) cannot be written
            code, out, err = _finish(_train(data_dir, *args, preexec_fn=_file_size_limit(1 << 20)))
        assert code == DISK_FULL_STATUS, err[-3000:]
        assert "Traceback" not in err
        [line] = _error_lines(err)
        reason = "no space left on device" if how == "tmpfs" else "file too large"
        assert f"could not write checkpoint {ckpts / 'ckpt-8'}: {reason}" in line, line
        assert " free on " in line and "ckpt-6 is intact" in line
        # No half-written checkpoint for the next resume to pick up; the last good one reads whole.
        assert sorted(p.name for p in ckpts.iterdir()) == [
            "checkpoint",
            *(
                f"ckpt-{step}.{part}"
                for step in (2, 4, 6)
                for part in ("data-00000-of-00001", "index")
            ),
        ]
        assert checkpoints.damage(str(ckpts / "ckpt-6")) is None

        (mount / "filler").unlink(missing_ok=True)  # space again: the run goes on from step 6
        report, _, _ = command.ok(run_dir, ["--resume"], steps=8)
        assert report["resumed_from"]["step"] == 6 and newest_checkpoint_step(run_dir) == 8
    finally:
        if how == "tmpfs":
            _unmount(mount)


def _wait_for(condition, proc, timeout=240):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.2)
    raise AssertionError("timed out")


@pytest.mark.slow
def test_one_writer_per_run_folder_and_a_stale_lock_is_taken_over(tmp_path, data_dir, command):
    """The lock's holder is a training process of its own, as it must be to be SIGKILLed; the run it
    refuses and the one that takes over its stale lock are the command in this process (a lock held by
    another process refuses this one all the same: flock)."""
    run_dir = tmp_path / "run"
    first = _train(
        data_dir, "--steps", "100000", "--checkpoint_every", "2", "--output_dir", run_dir
    )
    try:
        _wait_for(lambda: (newest_checkpoint_step(run_dir) or 0) >= 2, first)
        lock = json.loads((run_dir / ".lock").read_text())
        assert lock["pid"] == first.pid and lock["host"] == socket.gethostname()

        # A second run on the same folder refuses, naming the holder; the first runs on.
        code, out, err = command("--steps", "100000", "--resume", "--output_dir", run_dir)
        assert code == USER_ERROR_STATUS and "Traceback" not in err
        [line] = _error_lines(err)
        assert (
            f"in use by another acgan run (pid {first.pid} on host {socket.gethostname()})" in line
        )
        assert first.poll() is None and not (run_dir / "report.json").exists()

        # leaves its name in the lock file, but the kernel frees the lock
        first.send_signal(signal.SIGKILL)
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    killed_at = newest_checkpoint_step(run_dir)
    report, out, err = command.ok(run_dir, ["--resume"], steps=killed_at + 2)
    assert (
        f"note: took over a stale lock left by pid {first.pid} on host {socket.gethostname()}"
        in out
    )
    assert report["resumed_from"]["step"] == killed_at
    assert (run_dir / ".lock").read_text() == ""  # released cleanly


def test_a_failed_save_leaves_no_partial_checkpoint(tmp_path):
    """In-process: the save itself, with a real file-size limit hit inside TensorFlow's SaveV2."""
    import numpy as np

    from acgan.errors import DiskFull
    from acgan.util import disk

    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(v=tf.Variable(np.zeros(300_000, np.float32))),
        tmp_path / "checkpoints",
        max_to_keep=3,
    )
    checkpoints.save(manager, 1)
    disk.ignore_file_size_signal()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (500_000, hard))
    try:
        with pytest.raises(
            DiskFull, match=r"could not write checkpoint .*ckpt-2: file too large.*ckpt-1 is intact"
        ):
            checkpoints.save(manager, 2)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "checkpoint",
        "ckpt-1.data-00000-of-00001",
        "ckpt-1.index",
    ]
    assert tf.train.latest_checkpoint(str(tmp_path / "checkpoints")).endswith("ckpt-1")


def _fill_tensorboard(directory):
    """Writes as the loop does (scalars at every read, grid images) until something fails."""
    import numpy as np

    from acgan.training.tensorboard import SummaryWriter

    with SummaryWriter(directory) as writer:
        for step in range(200):
            writer.scalars({"d_loss": 1.0, "g_loss": 0.7}, step)
            writer.image(
                "samples",
                np.random.default_rng(step).integers(0, 256, (64, 64, 3), dtype=np.uint8),
                step,
            )


def test_a_full_disk_under_tensorboard_is_one_clear_line(tmp_path):
    """The event writer (acgan.training.tensorboard) writes synchronously, so a full disk is an error at
    the write that failed; needs a tmpfs."""
    from acgan.errors import DiskFull
    from acgan.util import disk

    mount = tmp_path / "disk"
    if not _mount_tmpfs(mount, "128k"):
        pytest.skip("cannot mount a tmpfs here (not root?)")
    try:
        with pytest.raises(
            DiskFull,
            match=r"could not write TensorBoard events .*tfevents\S*: no space left "
            r"on device; .* free on ",
        ):
            with disk.full_disk_stops_clearly(mount):
                _fill_tensorboard(mount / "tensorboard")
    finally:
        _unmount(mount)


def test_a_file_size_limit_under_tensorboard_is_one_clear_line(tmp_path):
    """TensorFlow's writer truncated its events file silently past a file-size limit; ours reports it."""
    from acgan.errors import DiskFull
    from acgan.util import disk

    disk.ignore_file_size_signal()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, hard))
    try:
        with pytest.raises(
            DiskFull, match=r"could not write TensorBoard events .*tfevents\S*: file too large"
        ):
            with disk.full_disk_stops_clearly(tmp_path):
                _fill_tensorboard(tmp_path / "tensorboard")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def test_whole_checkpoints_of_another_model_say_so_not_that_they_are_damaged(tmp_path):
    """A checkpoint that reads whole but does not restore was written for another model (an older
    preset, another version): the one line says that, and nothing is moved."""
    written = tf.train.Checkpoint(kernel=tf.Variable(tf.zeros([3, 4])))
    manager = tf.train.CheckpointManager(written, tmp_path, max_to_keep=3)
    manager.save(checkpoint_number=2)
    manager.save(checkpoint_number=4)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    other = tf.train.Checkpoint(kernel=tf.Variable(tf.zeros([3, 8])))
    with pytest.raises(UserError) as raised:
        checkpoints.restore_newest_intact(other, tmp_path)
    line = str(raised.value)
    assert (
        "read whole, but none fits the model" in line and "damaged" not in line and "\n" not in line
    )
    assert "ckpt-4 does not restore" in line and "ckpt-2 does not restore" in line
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    # now one is damaged too
    _overwrite_with_noise(tmp_path / "ckpt-4.data-00000-of-00001", start=0, length=64)
    with pytest.raises(UserError, match="cannot resume: no intact checkpoint"):
        checkpoints.restore_newest_intact(other, tmp_path)
