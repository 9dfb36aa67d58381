"""The training loop: data, models, the AC-GAN step, grids, TensorBoard, checkpoints and the report.

A run resumes from its folder: the checkpoint holds the models, the three optimizers (loss-scale
state included), the step and the timing history; the data stream and G's noise are rebuilt at the
restored step and the grid noise is a function of the seed. It runs on any tf.distribute strategy;
under multi_worker only the chief keeps files.
"""
import dataclasses
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import NamedTuple, Optional

import keras
import numpy as np
import tensorflow as tf

from acgan import data as data_lib
from acgan import advice, device, distribute, images, prices, run_report, timing
from acgan.config import DEFAULT_STEPS, Config
from acgan.errors import UserError
from acgan.files import write_atomically, write_json
from acgan.gan import ACGAN, add_noise
from acgan.health import DivergenceMonitor
from acgan.models import build_models, check_image_shape
from acgan.precision import needs_loss_scaling
from acgan.sampling import generate_images

GRID_COLUMNS = 10
# Settings that define the model, its optimizer state or its data stream: a resumed run keeps them.
RESUME_FIXED = ("dataset", "classes", "max_per_class", "policy", "width", "batch", "seed")


class RunResult(NamedTuple):
    run_dir: Path
    status: str                     # "completed", "interrupted" or "diverged"
    message: Optional[str] = None   # why it stopped early
    signal: Optional[int] = None    # the signal that interrupted it
    chief: bool = True              # False on multi-worker tasks whose files were discarded
    weights_fingerprint: Optional[str] = None


def default_run_dir(config, now=None):
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    dataset = re.sub(r"[^A-Za-z0-9_.-]+", "_", config.dataset.split(":")[-1].rstrip("/"))
    return Path("outputs") / f"{stamp}-{dataset}-{config.policy}-b{config.batch}"


def saved_config(run_dir):
    """The Config stored in a run folder, or None when the folder holds no run."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        return None
    try:
        return Config.from_json(path.read_text())
    except (ValueError, TypeError) as e:
        raise UserError(f"{path} is not a valid acgan config ({e.__class__.__name__}); cannot resume") from None


def check_resumable(config, saved, run_dir):
    if saved is None:
        raise UserError(f"nothing to resume in {run_dir}: it holds no run (no config.json)")
    changed = [f"--{k} {getattr(saved, k)!r} -> {getattr(config, k)!r}"
               for k in RESUME_FIXED if getattr(saved, k) != getattr(config, k)]
    if changed:
        raise UserError(f"cannot resume {run_dir} with a different model config ({'; '.join(changed)}); "
                        "use a new --output_dir")


def prepare_run_dir(config, chief=True):
    """The run's folder and whether it resumes an earlier run; refuses a file or an unwritable place.

    A non-chief multi-worker task only reads the folder: it creates and writes nothing there.
    """
    run_dir = Path(config.output_dir) if config.output_dir else default_run_dir(config)
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"--output_dir {run_dir} is a file, not a folder")
    saved = saved_config(run_dir) if run_dir.is_dir() else None
    resume = config.resume or saved is not None
    if resume:
        check_resumable(config, saved, run_dir)
    if not chief:
        return run_dir, resume
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write_test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UserError(f"cannot write to output folder {run_dir}: {e.strerror}") from None
    return run_dir, resume


def load_data(config):
    data = data_lib.load_dataset(
        config.dataset,
        split="train",
        data_dir=config.data_dir,
        classes=config.classes,
        max_per_class=config.max_per_class,
    )  # the data's own seed stays fixed: runs with other --seed values train on the same doodles
    check_image_shape(data.image_shape)
    if config.batch > len(data.images):
        raise UserError(f"--batch {config.batch} is larger than the dataset ({len(data.images)} images)")
    return data


def distributed_batches(strategy, data, config, noise_dim, start_step):
    """The run's (images, labels, z, fake_labels) global batches, split across the replicas.

    Every worker builds the same global stream and keeps its replicas' slices (DATA sharding: the
    images are in memory, there are no files to shard), so each step's global batch, noise included,
    is exactly the one a single device would train on.
    """
    batches = data_lib.make_pipeline(data, config.batch, config.seed, start_step=start_step)
    batches = add_noise(batches, noise_dim, data.num_classes, config.seed, start_step)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return strategy.experimental_distribute_dataset(batches.with_options(options))


def total_steps(config, num_images):
    """The step to stop at, or None when the run is bounded by --minutes."""
    if config.minutes is not None:
        return None
    if config.epochs is not None:
        return config.epochs * (num_images // config.batch)
    return config.steps or DEFAULT_STEPS


def grid_inputs(num_classes, noise_dim, seed):
    """Fixed grid noise: row r is class r, column c uses noise vector c in every row."""
    rng = np.random.default_rng(seed + 1)
    z = rng.uniform(-1.0, 1.0, (GRID_COLUMNS, noise_dim)).astype(np.float32)
    z = np.tile(z, (num_classes, 1))
    labels = np.repeat(np.arange(num_classes, dtype=np.int32), GRID_COLUMNS)
    return z, labels


class _Grids:
    """Saves grids at fixed noise to samples/ and TensorBoard."""

    def __init__(self, gan, run_dir, num_classes, seed):
        self.gan, self.dir, self.rows = gan, run_dir / "samples", num_classes
        self.z, self.labels = grid_inputs(num_classes, gan.noise_dim, seed)

    def save(self, step, name=None):
        samples = generate_images(self.gan, self.z, self.labels)
        grid = images.save_grid(samples, self.rows, self.dir / f"{name or f'step_{step:07d}'}.png")
        tf.summary.image("samples", grid[None], step=step)


class _Evaluator:
    """Judges the generator every --eval_every steps against the real test split (acgan.quality)."""

    def __init__(self, config):
        from acgan import judge

        self.samples = config.eval_samples
        self.test_set = data_lib.load_dataset(config.dataset, split="test", data_dir=config.data_dir,
                                              classes=config.classes, max_per_class=config.max_per_class)
        self.judge = judge.load_or_train(config.dataset, config.data_dir, config.classes,
                                         config.max_per_class, test_set=self.test_set)
        self.last = None

    def evaluate(self, gan, step):
        from acgan import quality

        self.last = dict(quality.evaluate_gan(gan, self.test_set, self.judge, self.samples), step=step)
        for name, value in quality.scalars(self.last).items():
            tf.summary.scalar(name, value, step=step)


class _History(tf.Module):
    """Timing history that travels in the checkpoint: per-step seconds and each session's compile time."""

    def __init__(self):
        super().__init__(name="history")
        self.step_seconds = tf.Variable(np.zeros(0), shape=tf.TensorShape([None]), dtype=tf.float64)
        self.compile_seconds = tf.Variable(np.zeros(0), shape=tf.TensorShape([None]), dtype=tf.float64)


class _StopSignals:
    """SIGINT / SIGTERM set a flag; the loop finishes its step, saves and stops."""

    def __init__(self):
        self.received = None
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        self.received = signum

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def run(config, command=None):
    """Trains (or resumes) one AC-GAN as `config` says. The dtype policy must be set already."""
    config.validate()
    policy = keras.mixed_precision.global_policy().name
    if policy != config.policy:
        raise RuntimeError(f"set the dtype policy {config.policy!r} before run() (it is {policy!r})")
    started = time.perf_counter()
    strategy = distribute.make_strategy(config.strategy, config.devices)  # before anything touches a device
    distribute.check_global_batch(config.batch, strategy.num_replicas_in_sync)
    chief = distribute.is_chief(strategy)
    data = load_data(config)
    run_dir, resume = prepare_run_dir(config, chief)
    # Every worker does the same work (reads of replicated state may be collective); only the chief's
    # files are kept. The others write into a scratch folder that is deleted at the end.
    files_dir = run_dir if chief else Path(tempfile.mkdtemp(prefix="acgan-worker-"))
    try:
        result = _train(config, command, started, strategy, data, run_dir, files_dir, resume, chief)
    finally:
        if not chief:
            shutil.rmtree(files_dir, ignore_errors=True)
    distribute.wait_for_all_workers(strategy)
    return result


def _train(config, command, started, strategy, data, run_dir, files_dir, resume, chief):
    replicas = strategy.num_replicas_in_sync
    evaluator = _Evaluator(config) if config.eval_every else None  # may train the judge: before seeding
    keras.utils.set_random_seed(config.seed)
    with strategy.scope():
        models = build_models(data.image_shape, data.num_classes, width=config.width)
    gan = ACGAN(models, data.num_classes, config.policy, jit=config.jit, strategy=strategy,
                sync_bn=config.sync_bn)
    machine = device.describe_device()
    layout = distribution_summary(strategy, gan)
    notes = advice.hardware_advice(config.policy, machine, advice.layer_widths(list(models)), config.batch)
    if gan.compile_mode == "off" and config.jit:
        notes.append(f"XLA is off: {gan.compile_reason}")
    for line in notes:
        print(f"note: {line}")
    if replicas > 1 or layout["workers"] > 1:
        print(f"strategy {layout['strategy']}: {replicas} replicas on {layout['workers']} worker(s), "
              f"{config.batch // replicas} samples each; XLA: {gan.compile_mode}")
    history = _History()
    checkpoints = tf.train.CheckpointManager(
        tf.train.Checkpoint(gan=gan, history=history), files_dir / "checkpoints",
        max_to_keep=config.keep_checkpoints,
    )
    resumed_from = None
    # Non-chief workers restore from the chief's folder (it must be on a file system they share).
    latest = tf.train.latest_checkpoint(str(run_dir / "checkpoints")) if resume else None
    if latest:
        checkpoints.checkpoint.restore(latest).assert_existing_objects_matched()
        resumed_from = {"step": int(gan.step.numpy()), "checkpoint": latest, "loss_scales": gan.loss_scales()}
    start_step = int(gan.step.numpy())
    steps = total_steps(config, len(data.images))
    if steps is not None and start_step >= steps:
        raise UserError(f"{run_dir} already reached step {start_step}; pass a larger --steps/--epochs to go on")
    write_atomically(files_dir / "config.json", config.to_json() + "\n")
    write_json(files_dir / "dataset.json", {
        "class_names": list(data.class_names),
        "image_shape": list(data.image_shape),
        "num_images": len(data.images),
    })
    if resumed_from:
        print(f"resuming {run_dir} from step {start_step}")

    writer = tf.summary.create_file_writer(str(files_dir / "tensorboard"))
    batches = iter(distributed_batches(strategy, data, config, gan.noise_dim, start_step))
    deadline = None if config.minutes is None else started + config.minutes * 60.0
    progress = keras.utils.Progbar(steps, stateful_metrics=_STATEFUL, unit_name="step", verbose=1 if chief else 0)
    monitor = DivergenceMonitor(needs_loss_scaling(config.policy), config.max_skipped_in_a_row,
                                gan.skipped_steps())
    step_seconds = list(history.step_seconds.numpy())
    compile_seconds = list(history.compile_seconds.numpy())

    def save_checkpoint(step):
        history.step_seconds.assign(np.asarray(step_seconds, np.float64))
        history.compile_seconds.assign(np.asarray(compile_seconds, np.float64))
        checkpoints.save(checkpoint_number=step)

    status, message, values, step, stop_signal = "completed", None, {}, start_step, None
    grids = _Grids(gan, files_dir, data.num_classes, config.seed)
    with writer.as_default(), _StopSignals() as signals:
        loop_started = time.perf_counter()
        while True:
            tick = time.perf_counter()
            metrics = gan.train_step(*next(batches))
            values = {k: float(v) for k, v in metrics.items()}  # the device sync
            elapsed = time.perf_counter() - tick
            step += 1
            session_step = step - start_step
            if session_step == 1:
                compile_seconds.append(elapsed)
            elif session_step > 1 + config.warmup_steps:
                step_seconds.append(elapsed)
            for name, value in values.items():
                tf.summary.scalar(name, value, step=step)
            message = monitor.check(step, values)
            if message:
                status = "diverged"
                break  # no checkpoint: the weights may already be non-finite
            progress.update(step, [(k, values[k]) for k in _SHOWN])
            if config.sample_every and step % config.sample_every == 0:
                grids.save(step)
            if evaluator and step % config.eval_every == 0:
                evaluator.evaluate(gan, step)
            if step % config.checkpoint_every == 0:
                save_checkpoint(step)
            stop_signal, out_of_time = signals.received, bool(deadline and time.perf_counter() >= deadline)
            if layout["workers"] > 1:  # all stop at the same step, or the others wait on a collective forever
                stop_signal, out_of_time = distribute.agree_on_stop(strategy, stop_signal, out_of_time)
            if stop_signal:
                status, message = "interrupted", f"stopped by {signal.Signals(stop_signal).name} at step {step}"
                break
            if (steps is not None and step >= steps) or out_of_time:
                break
        loop_seconds = time.perf_counter() - loop_started
        if status != "diverged":
            grids.save(step, name="final")
            if step % config.checkpoint_every:
                save_checkpoint(step)
    writer.flush()
    sys.stdout.write("\n")

    times = timing.timing_summary(step_seconds, config.batch, replicas)
    fingerprint = gan.weights_fingerprint()
    report = {
        "run_dir": str(run_dir),
        "command": command or "acgan.trainer.run",
        "status": status,
        "message": message,
        "config": dataclasses.asdict(config),
        "device": machine,
        "advice": notes,
        "policy": config.policy,
        "jit": config.jit,
        "batch": config.batch,
        "distribution": layout,
        "steps": step,
        "resumed_from": resumed_from,
        "warmup_steps": config.warmup_steps,
        "compile_seconds": compile_seconds[0] if compile_seconds else None,
        "compile_seconds_per_session": compile_seconds,
        "timing": times,
        "cost": run_cost(times.get("time_per_batch_ms"), config.price_per_hour, machine, layout),
        "peak_memory_bytes": device.peak_memory_bytes(),
        "loop_seconds": loop_seconds,
        "wall_seconds": time.perf_counter() - started,
        "final_metrics": values,
        "quality_during_training": evaluator.last if evaluator else None,
        "last_checkpoint": checkpoints.latest_checkpoint,
        "weights_fingerprint": fingerprint,
    }
    run_report.write_report(files_dir, report)
    return RunResult(run_dir, status, message, stop_signal, chief, fingerprint)


def distribution_summary(strategy, gan):
    """What the report says about the replicas: the strategy, their count and devices, how XLA is used."""
    replicas = strategy.num_replicas_in_sync
    return {
        "strategy": distribute.strategy_name(strategy),
        "replicas": replicas,
        "workers": distribute.worker_count(strategy),
        "replica_devices": distribute.replica_devices(strategy),
        "synchronized_batch_norm": gan.synchronized_batch_norm,
        "xla": gan.compile_mode,
        "xla_reason": gan.compile_reason,
    }


def run_cost(time_per_batch_ms, price_per_hour, machine, layout):
    """Cost of a million global batches on everything the run used (prices.priced_units)."""
    price = prices.choose_price(machine["name"], machine["kind"], price_per_hour)
    units, unit = prices.priced_units(price, layout["replicas"], layout["workers"])
    return timing.cost_summary(time_per_batch_ms, price["usd_per_hour"], units=units, unit=unit,
                               basis=price["description"])


# On the console: losses and accuracies averaged since the start, loss scale and skips as they are now.
_SHOWN = ("d_loss", "g_loss", "q_loss", "q_accuracy_real", "q_accuracy_fake", "g_loss_scale", "g_skipped")
_STATEFUL = ("g_loss_scale", "g_skipped")
