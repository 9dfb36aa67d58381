"""The benchmark worker: `python -m acgan.measure.worker JOB.json RESULT.json` times one configuration.

Started by acgan.sweep.run_sweep, one fresh process per configuration. Fault injection, for tests
only: ACGAN_SWEEP_INJECT="oom:16,kill:32" makes the worker for batch 16 raise
tf.errors.ResourceExhaustedError once its models are built, and the one for batch 32 kill itself with
SIGKILL (as the kernel's out-of-memory killer would).
"""
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path

from acgan.util.files import write_json

INJECT_VARIABLE = "ACGAN_SWEEP_INJECT"


def _injected(batch):
    wanted = [w.strip() for w in os.environ.get(INJECT_VARIABLE, "").split(",") if w.strip()]
    return next((kind for kind, _, b in (w.partition(":") for w in wanted) if b == str(batch)), None)


def run_bare(job):
    """Times the bare compiled step on device-resident tensors; returns the measurement."""
    import keras
    import numpy as np
    import tensorflow as tf

    from acgan.data.pipeline import sample_noise
    from acgan.measure import device
    from acgan.model import precision
    from acgan.model.networks import build_models
    from acgan.step import distribute
    from acgan.step.tf_step import ACGAN

    precision.set_policy(job["policy"])
    batch = job["batch"]
    with np.load(job["inputs"]) as f:
        images, labels = f["images"][:batch], f["labels"][:batch]
    on_gpu = bool(tf.config.list_physical_devices("GPU"))
    device.reset_peak_memory()
    baseline = device.peak_memory_bytes()
    strategy = distribute.make_strategy(job.get("strategy", "default"), job.get("devices"))
    distribute.check_global_batch(batch, strategy.num_replicas_in_sync, what="batch")
    keras.utils.set_random_seed(job["seed"])
    with strategy.scope():
        models = build_models(images.shape[1:], job["num_classes"], width=job["width"], arch=job.get("arch", "auto"))
    gan = ACGAN(models, job["num_classes"], job["policy"], jit=job["jit"], strategy=strategy)
    z, fake_labels = sample_noise(job["seed"], 0, batch, gan.noise_dim, job["num_classes"])
    inputs = (tf.constant(images), tf.constant(labels), z, fake_labels)
    if strategy.num_replicas_in_sync > 1:  # each replica's slice, once, on its device
        inputs = next(iter(strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensors(inputs))))
    else:
        inputs = [tf.identity(t) for t in inputs]  # onto the device
    injected = _injected(batch)
    if injected == "oom":
        raise tf.errors.ResourceExhaustedError(None, None, f"injected out-of-memory for batch {batch} ({INJECT_VARIABLE})")
    if injected == "kill":
        os.kill(os.getpid(), signal.SIGKILL)

    tick = time.perf_counter()
    gan.train_step(*inputs).read()  # .read(): the device sync
    compile_seconds = time.perf_counter() - tick
    for _ in range(job["warmup"]):
        metrics = gan.train_step(*inputs)
    if job["warmup"]:
        metrics.read()
    per_batch, loads = [], []
    for _ in range(job["repeats"]):
        tick = time.perf_counter()
        for _ in range(job["steps"]):
            metrics = gan.train_step(*inputs)
        values = metrics.read()
        per_batch.append((time.perf_counter() - tick) / job["steps"])
        loads.append(_load_average())
    return {
        "status": "ok",
        "compile_seconds": compile_seconds,
        "repeat_ms": [s * 1e3 for s in per_batch],
        "time_per_batch_ms": statistics.median(per_batch) * 1e3,
        "time_per_batch_min_ms": min(per_batch) * 1e3,
        "time_per_batch_max_ms": max(per_batch) * 1e3,
        "peak_memory_bytes": device.peak_memory_bytes(),
        "baseline_memory_bytes": None if on_gpu else baseline,
        "memory_counter": "GPU allocator peaks (TensorFlow), summed over every GPU" if on_gpu
        else "process peak resident memory (ru_maxrss), TensorFlow runtime included",
        "skipped_steps": {k: int(values[f"{k}_skipped"]) for k in "dgq"},
        "loss_scale": {k: values[f"{k}_loss_scale"] for k in "dgq"},
        "steps_run": 1 + job["warmup"] + job["repeats"] * job["steps"],
        "replicas": strategy.num_replicas_in_sync,
        "replica_devices": distribute.replica_devices(strategy),
        "xla": gan.compile_mode,
        "load_average": max(loads) if None not in loads else None,
    }


def _load_average():
    """The 1-minute load average (this worker's own threads included), or None where unknown."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


# Test hook: seconds of sleep added to every metrics read of the training loop (a known logging cost).
LOG_DELAY_VARIABLE = "ACGAN_INJECT_LOG_DELAY"


def run_trainer(job):
    """The full training loop through acgan.training.loop.run, timed like the bare step: the median
    over `repeats` windows of `steps` consecutive steps of the loop's wall time per step."""
    from acgan.config import Config
    from acgan.model import precision
    from acgan.training import loop

    # The compile step, the warm-up, the loop's own bare-step window (as long as the warm-up), the windows.
    steps = 1 + 2 * job["warmup"] + job["repeats"] * job["steps"]
    config = Config(
        dataset=job["dataset"], data_dir=job["data_dir"], max_per_class=job["max_per_class"],
        policy=job["policy"], batch=job["batch"], width=job["width"], arch=job.get("arch", "auto"),
        steps=steps, jit=job["jit"],
        seed=job["seed"], sample_every=None, checkpoint_every=steps, keep_checkpoints=1,
        warmup_steps=job["warmup"], log_every=job.get("log_every") or Config.log_every,
        output_dir=job["output_dir"], price_per_hour=job["price_per_hour"],
        strategy=job.get("strategy", "default"),
        devices=tuple(job["devices"]) if job.get("devices") else None,
    )
    config.validate()
    delay = float(os.environ.get(LOG_DELAY_VARIABLE) or 0)
    if delay:
        honest = loop.log_metrics

        def slow_log_metrics(step, values):
            time.sleep(delay)
            honest(step, values)

        loop.log_metrics = slow_log_metrics
    precision.set_policy(job["policy"])
    outcome = loop.run(config, command=job.get("command"))
    if outcome.status != "completed":
        return {"status": "failed", "run_dir": str(outcome.run_dir),
                "reason": one_line(f"training loop {outcome.status}: {outcome.message}")}
    report = json.loads((outcome.run_dir / "report.json").read_text())
    intervals = list(outcome.step_seconds)
    windows = [statistics.fmean(intervals[i:i + job["steps"]])
               for i in range(0, len(intervals) - job["steps"] + 1, job["steps"])]
    return {
        "status": "ok",
        "run_dir": str(outcome.run_dir),
        "window_ms": [w * 1e3 for w in windows],
        "time_per_batch_ms": statistics.median(windows) * 1e3 if windows else None,
        "time_per_batch_mean_ms": report["timing"].get("time_per_batch_ms"),
        "bare_step_ms": report["timing"].get("bare_step_ms"),
        "measured_steps": report["timing"].get("measured_steps"),
        "log_every": config.log_every,
        "loop_seconds": report.get("loop_seconds"),
        "steps": report.get("steps"),
    }


def worker_main(argv):
    job_path, result_path = argv[1:3]
    job = json.loads(Path(job_path).read_text())
    try:
        result = run_trainer(job) if job["mode"] == "trainer" else run_bare(job)
    except Exception as e:  # noqa: BLE001  every failure becomes a row, never a stopped sweep
        result = {"status": _status_of(e), "reason": one_line(f"{type(e).__name__}: {e}")}
        print(f"configuration failed: {result['reason']}", file=sys.stderr)
    write_json(result_path, result)


def _status_of(error):
    import tensorflow as tf

    if isinstance(error, tf.errors.ResourceExhaustedError):
        return "oom"
    text = str(error)
    # XLA reports device OOM as an internal error carrying the status code in its text.
    return "oom" if "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower() else "failed"


def one_line(text, limit=300):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


if __name__ == "__main__":
    worker_main(sys.argv)
