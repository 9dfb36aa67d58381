"""The training loop: set-up (data, models, restore), the step loop (grids, TensorBoard, checkpoints,
stop signals), and the run report.

A run resumes from its folder: the checkpoint holds the models, the three optimizers (loss-scale
state included), the step and the timing history; the data stream and G's noise are rebuilt at the
restored step and the grid noise is a function of the seed. It runs on any tf.distribute strategy;
under multi_worker only the chief keeps files.
"""
import dataclasses
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple, Optional

import keras
import numpy as np
import tensorflow as tf

from acgan import data as data_lib
from acgan.config import DEFAULT_STEPS
from acgan.data.pipeline import add_noise, make_pipeline
from acgan.errors import UserError
from acgan.measure import advice, device, timing
from acgan.model.networks import build_models, check_image_shape
from acgan.model.precision import needs_loss_scaling
from acgan.step import distribute
from acgan.step.tf_step import ACGAN
from acgan.training import checkpoints as checkpoint_files
from acgan.training import report as run_report
from acgan.training import run_lock
from acgan.training.health import DivergenceMonitor
from acgan.training.run_dir import prepare_run_dir, write_run_files
from acgan.training.sampling import TrainingGrids
from acgan.util import disk


class RunResult(NamedTuple):
    run_dir: Path
    status: str                     # "completed", "interrupted" or "diverged"
    message: Optional[str] = None   # why it stopped early
    signal: Optional[int] = None    # the signal that interrupted it
    chief: bool = True              # False on multi-worker tasks whose files were discarded
    weights_fingerprint: Optional[str] = None


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
    lock = run_lock.take(run_dir, chief)  # one writer per run folder (the chief); the kernel frees it if we die
    # Every worker does the same work (reads of replicated state may be collective); only the chief's
    # files are kept. The others write into a scratch folder that is deleted at the end.
    files_dir = run_dir if chief else Path(tempfile.mkdtemp(prefix="acgan-worker-"))
    try:
        with disk.full_disk_stops_clearly(files_dir):  # a full disk: DiskFull, one line, exit status 4
            setup = set_up(config, strategy, data, run_dir, files_dir, resume)
            outcome = train_loop(setup, config, started)
            report = assemble_report(setup, outcome, config, command, started)
            run_report.write_report(files_dir, report)
    finally:
        if not chief:
            shutil.rmtree(files_dir, ignore_errors=True)
        run_lock.release(lock)
    distribute.wait_for_all_workers(strategy)
    return RunResult(run_dir, outcome.status, outcome.message, outcome.signal, chief, report["weights_fingerprint"])


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
    batches = make_pipeline(data, config.batch, config.seed, start_step=start_step)
    batches = add_noise(batches, noise_dim, data.num_classes, config.seed, start_step)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return strategy.experimental_distribute_dataset(batches.with_options(options))


def total_steps(config, num_images):
    """The step to stop at, or None when the run is bounded by --minutes."""
    if config.minutes is not None:
        return None
    if config.epochs is not None:
        # Batches straddle epochs (data.pipeline), so E passes over n images take ceil(E*n/b) steps.
        return -(-config.epochs * num_images // config.batch)
    return config.steps or DEFAULT_STEPS


class TimingHistory(tf.Module):
    """Timing history that travels in the checkpoint: per-step seconds and each session's compile time."""

    def __init__(self):
        super().__init__(name="history")
        self.step_seconds = tf.Variable(np.zeros(0), shape=tf.TensorShape([None]), dtype=tf.float64)
        self.compile_seconds = tf.Variable(np.zeros(0), shape=tf.TensorShape([None]), dtype=tf.float64)


class StopSignals:
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


# ---- Set-up: models, step, checkpoint restore, run files ----

@dataclasses.dataclass
class Setup:
    """Everything the loop and the report need, built once before the first step."""
    strategy: object
    data: object
    run_dir: Path
    files_dir: Path               # run_dir on the chief; a scratch folder on other workers
    chief: bool
    gan: ACGAN
    machine: dict                 # device.describe_device()
    layout: dict                  # run_report.distribution_summary()
    notes: list                   # hardware advice, printed and reported
    history: TimingHistory
    checkpoints: tf.train.CheckpointManager
    resumed_from: Optional[dict]  # step, checkpoint and loss scales of a resumed run
    start_step: int
    steps: Optional[int]          # the step to stop at; None under --minutes
    evaluator: object             # quality.evaluation.TrainingEvaluator, or None


def set_up(config, strategy, data, run_dir, files_dir, resume):
    replicas = strategy.num_replicas_in_sync
    chief = files_dir == run_dir
    evaluator = None
    if config.eval_every:  # may train the judge: before seeding
        from acgan.quality.evaluation import TrainingEvaluator

        evaluator = TrainingEvaluator(config)
    keras.utils.set_random_seed(config.seed)
    with strategy.scope():
        models = build_models(data.image_shape, data.num_classes, width=config.width)
    gan = ACGAN(models, data.num_classes, config.policy, jit=config.jit, strategy=strategy,
                sync_bn=config.sync_bn)
    machine = device.describe_device()
    layout = run_report.distribution_summary(strategy, gan)
    notes = advice.hardware_advice(config.policy, machine, advice.layer_widths(list(models)), config.batch)
    if gan.compile_mode == "off" and config.jit:
        notes.append(f"XLA is off: {gan.compile_reason}")
    for line in notes:
        print(f"note: {line}")
    if replicas > 1 or layout["workers"] > 1:
        print(f"strategy {layout['strategy']}: {replicas} replicas on {layout['workers']} worker(s), "
              f"{config.batch // replicas} samples each; XLA: {gan.compile_mode}")
    history = TimingHistory()
    checkpoint = tf.train.Checkpoint(gan=gan, history=history)
    resumed_from = None
    # Non-chief workers restore from the chief's folder (it must be on a file system they share).
    # The newest intact checkpoint; damaged newer ones are moved aside (by the chief) before the
    # manager reads the state file.
    latest = checkpoint_files.restore_newest_intact(checkpoint, run_dir / "checkpoints", chief) if resume else None
    checkpoints = tf.train.CheckpointManager(checkpoint, files_dir / "checkpoints",
                                             max_to_keep=config.keep_checkpoints)
    if latest:
        resumed_from = {"step": int(gan.step.numpy()), "checkpoint": latest, "loss_scales": gan.loss_scales()}
    start_step = int(gan.step.numpy())
    steps = total_steps(config, len(data.images))
    if steps is not None and start_step >= steps:
        raise UserError(f"{run_dir} already reached step {start_step}; pass a larger --steps/--epochs to go on")
    write_run_files(files_dir, config, data)
    if resumed_from:
        print(f"resuming {run_dir} from step {start_step}")
    return Setup(strategy, data, run_dir, files_dir, chief, gan, machine, layout, notes, history, checkpoints,
                 resumed_from, start_step, steps, evaluator)


# ---- The loop ----

class LoopOutcome(NamedTuple):
    status: str                 # "completed", "interrupted" or "diverged"
    message: Optional[str]
    signal: Optional[int]
    step: int                   # the last step trained
    final_metrics: dict
    step_seconds: list          # every measured step of every session, warm-up excluded
    compile_seconds: list       # one per session
    loop_seconds: float


def train_loop(setup, config, started):
    """Runs steps until the length, --minutes, a stop signal or divergence; saves the last grid and
    checkpoint (unless diverged)."""
    s, gan = setup, setup.gan
    batches = iter(distributed_batches(s.strategy, s.data, config, gan.noise_dim, s.start_step))
    writer = tf.summary.create_file_writer(str(s.files_dir / "tensorboard"))
    grids = TrainingGrids(gan, s.files_dir, s.data.num_classes, config.seed)
    progress = keras.utils.Progbar(s.steps, stateful_metrics=_STATEFUL, unit_name="step",
                                   verbose=1 if s.chief else 0)
    monitor = DivergenceMonitor(needs_loss_scaling(config.policy), config.max_skipped_in_a_row,
                                gan.skipped_steps())
    deadline = None if config.minutes is None else started + config.minutes * 60.0
    step_seconds = list(s.history.step_seconds.numpy())
    compile_seconds = list(s.history.compile_seconds.numpy())

    def save_checkpoint(step):
        s.history.step_seconds.assign(np.asarray(step_seconds, np.float64))
        s.history.compile_seconds.assign(np.asarray(compile_seconds, np.float64))
        checkpoint_files.save(s.checkpoints, step)  # a full disk: DiskFull, the previous checkpoint intact

    status, message, values, step, stop_signal = "completed", None, {}, s.start_step, None
    with writer.as_default(), StopSignals() as signals:
        loop_started = time.perf_counter()
        while True:
            # -- one step, timed from fetching its batch to the device sync --
            tick = time.perf_counter()
            metrics = gan.train_step(*next(batches))
            values = {k: float(v) for k, v in metrics.items()}  # the device sync
            elapsed = time.perf_counter() - tick
            step += 1
            session_step = step - s.start_step
            if session_step == 1:
                compile_seconds.append(elapsed)
            elif session_step > 1 + config.warmup_steps:
                step_seconds.append(elapsed)

            # -- metrics, divergence, progress --
            for name, value in values.items():
                tf.summary.scalar(name, value, step=step)
            message = monitor.check(step, values)
            if message:
                status = "diverged"
                break  # no checkpoint: the weights may already be non-finite
            progress.update(step, [(k, values[k]) for k in _SHOWN])

            # -- grids, evaluation, checkpoints --
            if config.sample_every and step % config.sample_every == 0:
                grids.save(step)
            if s.evaluator and step % config.eval_every == 0:
                s.evaluator.evaluate(gan, step)
            if step % config.checkpoint_every == 0:
                save_checkpoint(step)

            # -- stop? --
            stop_signal, out_of_time = signals.received, bool(deadline and time.perf_counter() >= deadline)
            if s.layout["workers"] > 1:  # all stop at the same step, or the others wait on a collective forever
                stop_signal, out_of_time = distribute.agree_on_stop(s.strategy, stop_signal, out_of_time)
            if stop_signal:
                status, message = "interrupted", f"stopped by {signal.Signals(stop_signal).name} at step {step}"
                break
            if (s.steps is not None and step >= s.steps) or out_of_time:
                break
        loop_seconds = time.perf_counter() - loop_started
        if status != "diverged":
            grids.save(step, name="final")
            if step % config.checkpoint_every:
                save_checkpoint(step)
    writer.flush()
    sys.stdout.write("\n")
    return LoopOutcome(status, message, stop_signal, step, values, step_seconds, compile_seconds, loop_seconds)


# ---- The report ----

def assemble_report(setup, outcome, config, command, started):
    """report.json's content: settings, machine, timing, cost, memory, the final state."""
    s = setup
    times = timing.timing_summary(outcome.step_seconds, config.batch, s.strategy.num_replicas_in_sync)
    compile_seconds = outcome.compile_seconds
    return {
        "run_dir": str(s.run_dir),
        "command": command or "acgan.training.loop.run",
        "status": outcome.status,
        "message": outcome.message,
        "config": dataclasses.asdict(config),
        "device": s.machine,
        "advice": s.notes,
        "policy": config.policy,
        "jit": config.jit,
        "batch": config.batch,
        "distribution": s.layout,
        "steps": outcome.step,
        "resumed_from": s.resumed_from,
        "warmup_steps": config.warmup_steps,
        "compile_seconds": compile_seconds[0] if compile_seconds else None,
        "compile_seconds_per_session": compile_seconds,
        "timing": times,
        "cost": run_report.run_cost(times.get("time_per_batch_ms"), config.price_per_hour, s.machine, s.layout),
        "peak_memory_bytes": device.peak_memory_bytes(),
        "loop_seconds": outcome.loop_seconds,
        "wall_seconds": time.perf_counter() - started,
        "final_metrics": outcome.final_metrics,
        "quality_during_training": s.evaluator.last if s.evaluator else None,
        "last_checkpoint": s.checkpoints.latest_checkpoint,
        "weights_fingerprint": s.gan.weights_fingerprint(),
    }


# On the console: losses and accuracies averaged since the start, loss scale and skips as they are now.
_SHOWN = ("d_loss", "g_loss", "q_loss", "q_accuracy_real", "q_accuracy_fake", "g_loss_scale", "g_skipped")
_STATEFUL = ("g_loss_scale", "g_skipped")
