"""A multi_worker run that loses one of its processes ends in one line: what was lost, the step, the last
intact checkpoint and the command that resumes; the chief's report says "status": "lost_worker".

How a loss shows, measured with two processes on one machine and one killed with SIGKILL: the dead
process's connections close, so the survivor's next collective fails within seconds. TensorFlow raises
UnavailableError "Collective ops is aborted by: ..." naming the peer ("remote target
/job:worker/replica:0/task:1"); JAX a Gloo error ("Connection closed by peer"), which names its address only. With
two processes the lost one is the other, named from the cluster.
A process that vanishes without closing its connections (a host that dies) is found by the coordination
service's heartbeat instead: TensorFlow's after 10 s (its default), JAX's after HEARTBEAT_SECONDS.
"""

import re
from pathlib import Path

from acgan.errors import LostWorker, UserError
from acgan.util.files import read_json, write_json

# JAX's heartbeat timeout (jax.distributed.initialize; JAX's own default is 100 s). Heartbeats come from a
# thread of their own, so a slow step never misses one: only a process that is gone, or frozen, does.
HEARTBEAT_SECONDS = 30

_TF_ERRORS = ("UnavailableError", "CancelledError", "AbortedError", "InternalError")
_TF_PEER = re.compile(r"remote target /job:(\w+)/replica:\d+/task:(\d+)")
_JAX_SIGNS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "heartbeat timeout",
    "tasks are unhealthy",
)


def lost_peer(error, backend, peers):
    """What `error` says was lost, as a multi_worker run's collective raised it ("worker 1", "a peer
    process"), or None when it is not a lost peer. peers: the other processes' names; where there is one,
    it is the one lost whatever the error names (TensorFlow's text names the task only sometimes)."""
    text = str(error)
    if backend == "tensorflow":
        if type(error).__name__ not in _TF_ERRORS or "Collective ops is aborted" not in text:
            return None
        peer = _TF_PEER.search(text)
        named = f"{peer.group(1)} {peer.group(2)}" if peer else None
        return named or (peers[0] if len(peers) == 1 else "a peer worker")
    sign = next((s for s in _JAX_SIGNS if s in text), None)
    if sign is None:
        return None
    return f"{peers[0] if len(peers) == 1 else 'a peer process'} ({sign.lower()})"


def stopped(lost, step, run_dir, chief, newest_checkpoint):
    """The LostWorker to raise; on the chief, report.json first says "status": "lost_worker". step: the last
    step this process trained (None where it is not known: jax_supervisor.py); run_dir None where not given."""
    folder = run_dir / "checkpoints" if run_dir else None
    try:
        checkpoint = newest_checkpoint(folder) if folder and folder.is_dir() else None
    except UserError:  # every checkpoint damaged
        checkpoint = None
    name = Path(checkpoint).name if checkpoint else None
    resume = f"python -m acgan.train --resume --output_dir {run_dir or 'RUN'}"
    if chief and run_dir:
        path = run_dir / "report.json"
        report = read_json(path) or {}
        report.update(status="lost_worker", lost=lost, last_checkpoint=name, resume=resume)
        if step is not None:
            report["steps"] = step
        write_json(path, report)
    when = f" after step {step}" if step is not None else ""
    where = (
        f"the last intact checkpoint is {name}"
        if name
        else f"no intact checkpoint in {folder}"
        if folder
        else "its checkpoints are in the run's folder"
    )
    return LostWorker(
        f"lost {lost} of this multi_worker run{when}; {where}; resume on one process with "
        f"{resume} --strategy default, or start every process again with --resume"
    )
