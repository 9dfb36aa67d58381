"""The benchmark's worker processes: each in a fresh `python -m acgan.bench.worker JOB.json RESULT.json`
on its configuration's Keras backend (KERAS_BACKEND set), so that a crash, an out-of-memory kill or a
hang (--max_seconds) becomes that configuration's status, never a stopped sweep. The probe (the machine
as a backend sees it), each configuration's timing, and the trainer-overhead run."""

import dataclasses
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from acgan.bench.jobs import config_name, probe_job, step_job, trainer_job
from acgan.bench.results import make_row
from acgan.errors import UserError
from acgan.util.children import child_env, last_log_line

OVERHEAD_DIR = "overhead-trainer"


def probe_backend(settings, backend, image_shape, num_classes, work_dir):
    """(machine description, {policy: low-precision layer widths}) as a worker on `backend` sees them.

    UserError when the backend cannot start here, or rejects the inputs (e.g. their image shape)."""
    result = run_worker(
        probe_job(settings, backend, image_shape, num_classes),
        Path(work_dir),
        Path(work_dir) / f"probe-{backend}.log",
        extra_env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
    )
    if result["status"] == "user_error":
        raise UserError(result["reason"])
    if result["status"] != "ok":
        raise UserError(f"the {backend} backend did not start: {result['reason']}")
    return result["machine"], result["layer_widths"]


def run_worker(job, work_dir, log_path, extra_env=None, max_seconds=None):
    """Runs one job (an acgan.bench.jobs record) in a fresh Python process on the job's Keras backend, its
    files `job.name`.job.json and .result.json in `work_dir`; a dead worker becomes status
    'failed' with its reason, and one still running after `max_seconds` (None: no limit) is killed and
    becomes status 'too_slow' (e.g. float16 filter gradients in oneDNN's reference loop on some CPUs,
    100x slower than the other settings, whose timing would hold up the sweep for minutes)."""
    job_path, result_path = work_dir / f"{job.name}.job.json", work_dir / f"{job.name}.result.json"
    job_path.write_text(job.to_json())
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open(log_path, "w") as log:
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "acgan.bench.worker", str(job_path), str(result_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                # Keras on the job's backend, acgan importable
                env=dict(child_env(), KERAS_BACKEND=job.backend, **(extra_env or {})),
                timeout=max_seconds,
            )
        except subprocess.TimeoutExpired:  # subprocess.run has killed the worker
            proc = None
    if proc is None:
        result = {
            "status": "too_slow",
            "reason": f"stopped after {max_seconds:g} s (--max_seconds), its timing unfinished",
        }
    elif result_path.exists():
        result = json.loads(result_path.read_text())
    else:
        if proc.returncode < 0:
            how = f"worker killed by {signal.Signals(-proc.returncode).name}"
            if proc.returncode == -signal.SIGKILL:
                how += " (the out-of-memory killer sends this)"
        else:
            how = f"worker exited with status {proc.returncode}"
        last = last_log_line(log_path)
        result = {"status": "failed", "reason": f"{how}{': ' + last if last else ''}"}
    return dict(result, worker_seconds=time.perf_counter() - started, log=str(log_path))


EMA_PROBE_DECAY = 0.999  # the decay the G-EMA cost is timed at when the preset keeps no average


def measure_ema_cost(job, bare, work_dir, log_path):
    """What G's moving average costs per step: the bare step at the overhead configuration (`job`, whose
    timing is the row `bare`) with the average and without (one more worker, the other side of `bare`):
    {"decay", "with_ms", "without_ms", "ratio"}, or {"status": "failed", "reason"}."""
    if bare["status"] != "ok":
        return {"status": "failed", "reason": f"bare step: {bare['reason']}"}
    kept = bare.get("ema_decay") or 0.0
    job = dataclasses.replace(
        job, config=dataclasses.replace(job.config, ema_decay=0.0 if kept else EMA_PROBE_DECAY)
    )
    other = run_worker(job, work_dir, log_path)
    if other["status"] != "ok":
        return {"status": "failed", "reason": other.get("reason")}
    with_ms, without_ms = (
        (bare["time_per_batch_ms"], other["time_per_batch_ms"])
        if kept
        else (other["time_per_batch_ms"], bare["time_per_batch_ms"])
    )
    return {
        "status": "ok",
        "decay": kept or EMA_PROBE_DECAY,
        "with_ms": with_ms,
        "without_ms": without_ms,
        "ratio": with_ms / without_ms,
    }


def measure_overhead(settings, run, rows, inputs, num_classes, work_dir, output_dir, echo=print):
    """The full training loop (loop.run: real input pipeline, metric reads, TensorBoard, progress bar)
    against the bare step at one configuration: the median of `repeats` windows of `steps` steps each,
    on both sides."""
    backend = run["backend"]
    policy, batch, jit = settings.policies[0], settings.overhead_batch, True in settings.jits
    name = config_name(backend, policy, batch, jit)
    echo(f"trainer overhead: {backend}, {policy}, batch {batch}, XLA {'on' if jit else 'off'}")
    bare_job = step_job(settings, backend, policy, batch, jit, inputs, num_classes)
    bare = next(
        (
            r
            for r in rows
            if (r["backend"], r["policy"], r["batch"], r["jit"]) == (backend, policy, batch, jit)
        ),
        None,
    )
    if bare is None:  # the sweep did not time this configuration
        bare = make_row(
            run,
            policy,
            batch,
            jit,
            run_worker(bare_job, work_dir, output_dir / "logs" / f"overhead-bare-{name}.log"),
        )
    # One trainer run folder per backend (overhead-trainer-jax, ...) when the sweep has several.
    trainer_dir = OVERHEAD_DIR if len(settings.backends) == 1 else f"{OVERHEAD_DIR}-{backend}"
    job = trainer_job(
        settings,
        backend,
        policy,
        batch,
        jit,
        inputs,
        output_dir / trainer_dir,
        bare["price_per_hour"],
        run["command"],
    )
    loop = run_worker(job, work_dir, output_dir / "logs" / f"overhead-trainer-{name}.log")
    ema = measure_ema_cost(
        bare_job, bare, work_dir, output_dir / "logs" / f"overhead-ema-{name}.log"
    )
    ok = loop["status"] == "ok" and bare["status"] == "ok"
    return {
        "backend": backend,
        "policy": policy,
        "batch": batch,
        "jit": jit,
        "status": "ok" if ok else "failed",
        "reason": None
        if ok
        else (loop.get("reason") if loop["status"] != "ok" else f"bare step: {bare['reason']}"),
        # Median against median, over the same number of windows of the same number of steps.
        "trainer_time_per_batch_ms": loop.get("time_per_batch_ms"),
        "trainer_window_ms": loop.get("window_ms"),
        "trainer_log_every": loop.get("log_every"),
        "trainer_window_steps": loop.get("window_steps"),
        "trainer_measured_steps": loop.get("measured_steps"),
        "trainer_loop_seconds": loop.get("loop_seconds"),
        "trainer_steps": loop.get("steps"),
        "trainer_run_dir": loop.get("run_dir"),
        "bare_time_per_batch_ms": bare["time_per_batch_ms"],
        "ratio": loop["time_per_batch_ms"] / bare["time_per_batch_ms"] if ok else None,
        "ema": ema,
    }
