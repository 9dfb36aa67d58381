"""The benchmark worker: `python -m acgan.bench.worker JOB.json RESULT.json` times one configuration.

Started by acgan.bench.sweep.run_sweep, one fresh process per configuration, with KERAS_BACKEND set to the
configuration's backend (the parent never loads Keras). Modes, each a record of acgan.bench.jobs in
JOB.json: "bare" (StepJob: the compiled step alone), "trainer" (TrainerJob: the full training loop) and
"probe" (ProbeJob: the machine as this backend sees it, and the models' layer widths, for the parent).

The parent chose the backend: it set KERAS_BACKEND in this process's environment, so Keras, the models,
the steps' factory and the training loop load at the top, on that backend (worker_main checks that it is
the job's). What only one backend runs (TensorFlow itself, JAX and its runtime) is imported in the
function that runs on it: a JAX worker never imports TensorFlow, nor a TensorFlow worker JAX.
"""

import json
import os
import statistics
import sys
import time
from pathlib import Path

import keras
import numpy as np

from acgan import backend, presets
from acgan.bench.jobs import Job, ProbeJob, StepJob, TrainerJob
from acgan.data.batches import sample_noise
from acgan.errors import UserError, one_line
from acgan.measure import advice, device, flops, profile, timing
from acgan.model import jax_formulations, precision
from acgan.model.networks import build_models
from acgan.training import loop
from acgan.training.setup import make_runtime
from acgan.util.files import write_json


def run_bare(job):
    """Times the bare compiled step on device-resident tensors; returns the measurement. The step, its
    devices and its inputs' placement are the training runtime's (training/setup.make_runtime): one
    device, or a tf.distribute strategy or a JAX mesh over several, as a run of the same Config trains."""
    config = job.config
    precision.set_policy(config.policy)
    jax_formulations.use(config)
    with np.load(job.inputs) as f:
        images, labels = f["images"][: job.batch], f["labels"][: job.batch]
    # Before anything touches a device (JAX's CPU device count, TensorFlow's logical CPUs are set there).
    runtime = make_runtime(config)
    device.reset_peak_memory()
    # On JAX the peak cannot be reset: a fresh process starts low.
    baseline = device.peak_memory_bytes()
    backend.set_random_seed(config.seed)
    preset = presets.resolve(config, images.shape[1:])
    with runtime.scope():
        models = build_models(images.shape[1:], job.num_classes, width=config.width, arch=preset)
    trainer = runtime.make_step(preset, models, job.num_classes, config)
    z, fake_labels = sample_noise(config.seed, 0, job.batch, trainer.noise_dim, job.num_classes)
    inputs = runtime.resident((images, labels, z, fake_labels))
    result = _time_step(job, trainer, inputs)
    result.update(
        peak_memory_bytes=device.peak_memory_bytes(),
        baseline_memory_bytes=None if runtime.accelerated else baseline,
        memory_counter=(GPU_COUNTER if runtime.accelerated else CPU_COUNTER)[runtime.name],
        replicas=runtime.replicas,
    )
    if runtime.name == "jax":
        import jax  # here: a TensorFlow worker never imports JAX

        result.update(
            matmul_precision=str(jax.config.jax_default_matmul_precision or "default"),
            jax_conv_transpose=config.jax_conv_transpose,
            jax_batch_norm=config.jax_batch_norm,
        )
    return result


# What peak_memory_bytes counts, per backend, as the rows name it.
GPU_COUNTER = {
    "tensorflow": "GPU allocator peaks (TensorFlow), summed over every GPU",
    "jax": "JAX device peak_bytes_in_use, summed over the step's devices (the worker's whole life, "
    "as JAX cannot reset it)",
}
CPU_COUNTER = {
    "tensorflow": "process peak resident memory (ru_maxrss), TensorFlow runtime included",
    "jax": "process peak resident memory (ru_maxrss), JAX runtime included",
}


def _time_step(job, trainer, inputs):
    """The timing protocol both backends share: the compile step (with the count of its FLOPs), `warmup`
    steps, then `repeats` timings of `steps` steps each, every timing between two device syncs
    (StepMetrics.read())."""
    tick = time.perf_counter()
    # On JAX this compiles the step (XLA's cost analysis needs the executable); the first step reuses it.
    flops_per_batch, counted_by = flops.count_step_flops(trainer, inputs, job.batch)
    trainer.train_step(*inputs).read()  # .read(): the device sync
    compile_seconds = time.perf_counter() - tick
    if job.warmup:
        timing.bare_step_seconds(trainer, inputs, job.warmup)  # untimed: warm-up steps, then a sync
    per_batch, loads = [], []
    for _ in range(job.repeats):
        seconds, values = timing.bare_step_seconds(trainer, inputs, job.steps)
        per_batch.append(seconds)
        loads.append(_load_average())
    profiled = None
    if job.profile_dir:
        try:
            profiled = _profile(job, trainer, inputs)
        except Exception as e:  # noqa: BLE001  a profiler that cannot run here costs the profile, not the timing
            profiled = {"error": one_line(f"{type(e).__name__}: {e}")}
            print(f"profile failed: {profiled['error']}", file=sys.stderr)
    return {
        "status": "ok",
        "profile": profiled,
        "compile_seconds": compile_seconds,
        "repeat_ms": [s * 1e3 for s in per_batch],
        "time_per_batch_ms": statistics.median(per_batch) * 1e3,
        "time_per_batch_min_ms": min(per_batch) * 1e3,
        "time_per_batch_max_ms": max(per_batch) * 1e3,
        "skipped_steps": {k: int(values[f"{k}_skipped"]) for k in "dgq"},
        "loss_scale": {k: values[f"{k}_loss_scale"] for k in "dgq"},
        "steps_run": 1 + job.warmup + job.repeats * job.steps,
        "flops_per_batch": flops_per_batch,
        "flops_counted_by": counted_by,
        "xla": trainer.compile_mode,
        "ema_decay": trainer.ema_decay,  # G's average, updated inside the step (0: none)
        "load_average": max(loads) if None not in loads else None,
    }


def _profile(job, trainer, inputs):
    """After the timings: a profiler trace of the job's profile_length more steps in its profile_dir, and its
    summary (measure.profile) beside it; what the benchmark's page shows of it."""
    directory, steps = Path(job.profile_dir), job.profile_length
    with profile.trace(directory):
        timing.bare_step_seconds(trainer, inputs, steps)
    summary = profile.summarize(
        directory,
        steps,
        trainer.compiled_hlo(),
        title=f"{job.backend}, {job.policy}, batch {job.batch}, XLA {'on' if job.jit else 'off'}",
    )
    return {
        "dir": str(directory),
        "steps": steps,
        "device_ms_per_step": summary["device_ms_per_step"],
        "grouped_by": summary["grouped_by"],
        "groups": {g["group"]: g["ms_per_step"] for g in summary["groups"]},
    }


def run_probe(job):
    """What the parent needs before the sweep, without loading a backend itself: this backend's
    description of the machine, and per policy the low-precision layer widths of the models."""
    presets.named(job.arch, job.image_shape)  # UserError for a shape the preset cannot build
    machine = device.describe_device()
    widths = {}
    for policy in job.policies:
        widths[policy] = {}
        if policy != "float32":
            precision.set_policy(policy)
            models = build_models(job.image_shape, job.num_classes, job.width, arch=job.arch)
            widths[policy] = advice.layer_widths(list(models))
            keras.backend.clear_session()
    return {"status": "ok", "machine": machine, "layer_widths": widths}


def _load_average():
    """The 1-minute load average (this worker's own threads included), or None where unknown."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def run_trainer(job):
    """The full training loop through acgan.training.loop.run on the job's Config (jobs.trainer_job says how
    its windows time it): the median over its windows of the loop's wall time per step."""
    outcome = loop.run(job.config, command=job.command)
    if outcome.status != "completed":
        return {
            "status": "failed",
            "run_dir": str(outcome.run_dir),
            "reason": one_line(f"training loop {outcome.status}: {outcome.message}"),
        }
    report = json.loads((outcome.run_dir / "report.json").read_text())
    intervals = list(outcome.step_seconds)
    windows = [
        statistics.fmean(intervals[i : i + job.window])
        for i in range(0, len(intervals) - job.window + 1, job.window)
    ]
    return {
        "status": "ok",
        "run_dir": str(outcome.run_dir),
        "window_ms": [w * 1e3 for w in windows],
        "window_steps": job.window,
        "time_per_batch_ms": statistics.median(windows) * 1e3 if windows else None,
        "measured_steps": report["timing"].get("measured_steps"),
        "log_every": job.config.log_every,
        "loop_seconds": report.get("loop_seconds"),
        "steps": report.get("steps"),
    }


MODES = {StepJob.mode: run_bare, TrainerJob.mode: run_trainer, ProbeJob.mode: run_probe}


def worker_main(argv):
    job_path, result_path = argv[1:3]
    job = Job.from_json(Path(job_path).read_text())  # any mode's job, its fields typed
    try:
        # The parent set KERAS_BACKEND for this process, and Keras loaded on it: use() checks it is the job's.
        backend.use(job.backend)
        print(f"worker: {job.mode} on Keras backend {keras.backend.backend()}", flush=True)
        result = MODES[job.mode](job)
    except (
        UserError
    ) as e:  # a setting the parent could not check without a backend (e.g. the image shape)
        result = {"status": "user_error", "reason": str(e)}
        print(f"error: {e}", file=sys.stderr)
    except Exception as e:  # noqa: BLE001  every failure becomes a row, never a stopped sweep
        result = {"status": _status_of(e), "reason": one_line(f"{type(e).__name__}: {e}")}
        print(f"configuration failed: {result['reason']}", file=sys.stderr)
    write_json(result_path, result)


def _status_of(error):
    """ "oom" for an out-of-memory error of either backend, else "failed". Never imports TensorFlow:
    its error class is checked only where it is loaded already (a JAX worker never loads it)."""
    tf = sys.modules.get("tensorflow")
    errors = getattr(tf, "errors", None)
    if errors is not None and isinstance(error, errors.ResourceExhaustedError):
        return "oom"
    text = str(error)
    # XLA (TensorFlow's and JAX's XlaRuntimeError alike) reports device OOM as an error carrying the status
    # code in its text.
    return "oom" if "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower() else "failed"


if __name__ == "__main__":
    worker_main(sys.argv)
