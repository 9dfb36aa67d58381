"""A JAX multi_worker process trains in a child process of its own, so that losing the coordinator ends in
acgan's line too. JAX ends a process whose coordination service reports an error (the coordinator gone, a
peer's heartbeat timed out) by aborting it from a thread of its own (jaxlib's client.h: FATAL below)
before Python can act, and the hook it offers, the client's missed-heartbeat callback, fails to convert
the status it is called with (std::bad_cast). A peer lost any other way is found in the child
(lost_worker.py). This parent imports no framework: it passes stdout through, copies stderr line by line,
forwards SIGINT and SIGTERM (the child has a process group of its own, so a terminal's Ctrl-C reaches it
once), takes the child with it when killed, and turns that abort into LostWorker (the line and exit
status LOST_WORKER_STATUS) and the chief's report."""

import ctypes
import ctypes.util
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from acgan.training import jax_checkpoints, lost_worker

CHILD = "ACGAN_JAX_TRAINING_PROCESS"  # set in the child, which then trains itself
FATAL = "Terminating process because the JAX distributed service detected fatal errors"


def needed(config):
    return (
        config.backend == "jax" and config.strategy == "multi_worker" and not os.environ.get(CHILD)
    )


def _die_with_parent():
    """In the child: SIGKILL when this parent dies (Linux's PR_SET_PDEATHSIG), so that killing the process a
    scheduler started kills its training too, as it would kill one process."""
    libc = ctypes.util.find_library("c")
    if libc and sys.platform.startswith("linux"):
        ctypes.CDLL(libc).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


def _lost(stderr):
    """Which process JAX's error text says was lost."""
    peer = re.search(r"Task (\d+) heartbeat timeout", stderr)
    if peer:
        return f"process {peer.group(1)}"
    if "coordination_service" in stderr and (
        "Socket closed" in stderr or "Connection reset" in stderr
    ):
        return "process 0 (the coordinator)"
    return "a peer process"


def supervise(config):
    """Runs this command again as the training process and returns its exit status; raises LostWorker
    (the CLI's line and LOST_WORKER_STATUS) when JAX aborted it for a lost peer."""
    child = subprocess.Popen(
        sys.orig_argv,
        env=dict(os.environ, **{CHILD: "1"}),
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        process_group=0,
        preexec_fn=_die_with_parent,
    )
    for stop in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop, lambda signum, frame: child.send_signal(signum))
    seen = []
    for line in child.stderr:
        if (
            seen or FATAL in line
        ):  # JAX's abort: its status, a native stack, a module list; the line replaces it
            seen.append(line)
            continue
        sys.stderr.write(line)
        sys.stderr.flush()
    status = child.wait()
    if not seen:
        return status if status >= 0 else 128 - status
    process_id = (
        config.process_id
        if config.process_id is not None
        else int(os.environ.get("JAX_PROCESS_ID", -1))
    )
    run_dir = Path(config.output_dir) if config.output_dir else None
    raise lost_worker.stopped(
        _lost("".join(seen)), None, run_dir, process_id == 0, jax_checkpoints.newest_intact
    )
