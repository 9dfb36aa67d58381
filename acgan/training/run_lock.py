"""One writer per run folder: a run holds an flock on `<run folder>/.lock` for its lifetime.

The kernel drops an flock when its holder dies (SIGKILL, a crash; after a power loss nothing is
held), so a lock that can be taken is never in use. The file keeps the holder's pid and host: a
second process names them when it refuses, and a taker that finds them left behind (the holder died
without releasing) says it took over a stale lock. A clean release empties the file. On multi-worker
runs only the chief, the one process that writes the folder, takes the lock.
"""

import contextlib
import errno
import fcntl
import json
import os
import socket
import time
from datetime import datetime
from pathlib import Path

from acgan.errors import UserError
from acgan.util import disk

LOCK_NAME = ".lock"


class RunLock:
    def __init__(self, run_dir):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.fd = None

    def acquire(self):
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            disk.raise_if_full(e, "lock file", self.path)
            raise UserError(f"cannot create the run lock {self.path}: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _read_holder(fd, wait=e.errno in (errno.EWOULDBLOCK, errno.EAGAIN))
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise UserError(
                    f"cannot lock the run folder {self.run_dir}: {e.strerror}"
                ) from None
            raise UserError(
                f"{self.run_dir} is in use by another acgan run (pid {holder.get('pid', '?')} on "
                f"host {holder.get('host', '?')}); wait for it to end or stop it, or use another "
                "--output_dir"
            ) from None
        self.fd = fd
        stale = _read_holder(fd)
        if stale:
            print(
                f"note: took over a stale lock left by pid {stale.get('pid', '?')} on host "
                f"{stale.get('host', '?')} (that process is gone)"
            )
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": datetime.now().isoformat(timespec="seconds"),
        }
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
            os.fsync(fd)
        except OSError as e:
            self.release()
            disk.raise_if_full(e, "lock file", self.path)
            raise

    def release(self):
        if self.fd is None:  # never acquired (a non-chief task's), or released
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)  # an empty lock file: released cleanly
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None


def _read_holder(fd, wait=False):
    """The holder's {"pid", "host"} from the lock file; {} when empty. With `wait`, gives a holder
    that has just taken the lock a moment to write its name."""
    for _ in range(20 if wait else 1):
        try:
            text = os.pread(fd, 4096, 0).decode(errors="replace").strip()
        except OSError:
            text = ""
        if text:
            try:
                holder = json.loads(text)
                return holder if isinstance(holder, dict) else {"pid": text[:40]}
            except ValueError:
                return {"pid": text[:40]}
        if wait:
            time.sleep(0.05)
    return {}
