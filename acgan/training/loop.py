"""The training loop: set-up (data, models, restore), the step loop (grids, TensorBoard, checkpoints,
stop signals), and the run report.

A run resumes from its folder: the checkpoint holds the models, the three optimizers (loss-scale
state included), the step and the timing history; the data stream and G's noise are rebuilt at the
restored step and the grid noise is a function of the seed. The backend's differences (strategy,
step, input stream, checkpoint files) sit behind a runtime: tf_runtime.py (any tf.distribute strategy;
under multi_worker only the chief keeps files) or jax_runtime.py (one device or a jax.sharding mesh;
under multi_worker only process 0 keeps files). This module imports
neither TensorFlow nor JAX.
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

from acgan import backend
from acgan import data as data_lib
from acgan.config import DEFAULT_STEPS
from acgan.errors import UserError
from acgan.measure import advice, device
from acgan.measure.profile import StepWindow
from acgan.model.networks import build_models, check_image_shape, resolve_arch
from acgan.model.precision import needs_loss_scaling
from acgan.step.common import OPTIMIZER_NAMES, adversarial_loss, learning_rate_decay, learning_rate_scale
from acgan.training import report as run_report
from acgan.training import run_lock
from acgan.training.health import DivergenceMonitor
from acgan.training.run_dir import prepare_run_dir, write_run_files
from acgan.training.sampling import TrainingGrids
from acgan.training.session_timing import SessionClock, session_record
from acgan.training.tensorboard import SummaryWriter
from acgan.util import disk


def make_runtime(config):
    """The backend's runtime for this run: Keras must already run on config.backend."""
    running = keras.backend.backend()
    if running != config.backend:
        raise RuntimeError(f"Keras runs on {running}, the run asks for {config.backend} (acgan.backend.use first)")
    if config.backend == "jax":
        from acgan.training.jax_runtime import JaxRuntime

        return JaxRuntime(config)
    from acgan.training.tf_runtime import TensorFlowRuntime

    return TensorFlowRuntime(config)


class RunResult(NamedTuple):
    run_dir: Path
    status: str                     # "completed", "interrupted" or "diverged"
    message: Optional[str] = None   # why it stopped early
    signal: Optional[int] = None    # the signal that interrupted it
    chief: bool = True              # False on multi-worker tasks whose files were discarded
    weights_fingerprint: Optional[str] = None
    step_seconds: tuple = ()        # this session's wall time per timed step


def run(config, command=None, make_evaluator=None):
    """Trains (or resumes) one AC-GAN as `config` says. The dtype policy must be set already.

    make_evaluator: with --eval_every, builds the in-training evaluator from the config (the caller's:
    acgan.quality.evaluation.TrainingEvaluator; training does not import quality)."""
    config.validate()
    if config.eval_every and make_evaluator is None:
        raise ValueError("config.eval_every needs run(..., make_evaluator=...) to judge the samples with")
    policy = keras.mixed_precision.global_policy().name
    if policy != config.policy:
        raise RuntimeError(f"set the dtype policy {config.policy!r} before run() (it is {policy!r})")
    started = time.perf_counter()
    runtime = make_runtime(config)  # before anything touches a device
    chief = runtime.chief
    data = load_data(config)
    # "auto" becomes the preset it picks for this data (and the loss that preset trains with), saved as such,
    # so every reader rebuilds that one.
    arch = resolve_arch(config.arch, data.image_shape)
    config = dataclasses.replace(config, arch=arch, loss=adversarial_loss(arch, config.loss))
    run_dir, resume = prepare_run_dir(config, chief)
    lock = run_lock.take(run_dir, chief)  # one writer per run folder (the chief); the kernel frees it if we die
    # Every worker does the same work (reads of replicated state may be collective); only the chief's
    # files are kept. The others write into a scratch folder that is deleted at the end.
    files_dir = run_dir if chief else Path(tempfile.mkdtemp(prefix="acgan-worker-"))
    try:
        with disk.full_disk_stops_clearly(files_dir):  # a full disk: DiskFull, one line, exit status 4
            setup = set_up(config, runtime, data, run_dir, files_dir, resume, make_evaluator)
            outcome = train_loop(setup, config, started)
            report = assemble_report(setup, outcome, config, command, started)
            run_report.write_report(files_dir, report)
    finally:
        if not chief:
            shutil.rmtree(files_dir, ignore_errors=True)
        run_lock.release(lock)
    runtime.wait_for_all_workers()
    return RunResult(run_dir, outcome.status, outcome.message, outcome.signal, chief, report["weights_fingerprint"],
                     outcome.clock.intervals)


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


def total_steps(config, num_images):
    """The step to stop at, or None when the run is bounded by --minutes."""
    if config.minutes is not None:
        return None
    if config.epochs is not None:
        # Batches straddle epochs (data.pipeline), so E passes over n images take ceil(E*n/b) steps.
        return -(-config.epochs * num_images // config.batch)
    return config.steps or DEFAULT_STEPS


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
    runtime: object               # tf_runtime.TensorFlowRuntime or jax_runtime.JaxRuntime
    data: object
    run_dir: Path
    files_dir: Path               # run_dir on the chief; a scratch folder on other workers
    chief: bool
    gan: object                   # the backend's step (tf_step.ACGAN or jax_step.JaxACGAN)
    machine: dict                 # device.describe_device()
    layout: dict                  # run_report.distribution_summary()
    notes: list                   # hardware advice, printed and reported
    earlier_sessions: list        # session_record dicts of the sessions before this one
    checkpoints: object           # the runtime's: restore(), save(step, sessions), latest_checkpoint
    resumed_from: Optional[dict]  # step, checkpoint and loss scales of a resumed run
    start_step: int
    steps: Optional[int]          # the step to stop at; None under --minutes
    evaluator: object             # make_evaluator's (evaluate(gan, step, writer), last), or None
    learning_rate_decay: Optional[float]  # the last fraction of the run the rates fall over; None: constant


def set_up(config, runtime, data, run_dir, files_dir, resume, make_evaluator=None):
    replicas = runtime.replicas
    chief = files_dir == run_dir
    evaluator = None
    if config.eval_every:  # may train the judge: before seeding
        evaluator = make_evaluator(config)
    backend.set_random_seed(config.seed)
    with runtime.scope():
        models = build_models(data.image_shape, data.num_classes, width=config.width, arch=config.arch)
    gan = runtime.make_step(models, data.num_classes, config)
    machine = device.describe_device()
    layout = runtime.layout(gan)
    notes = runtime.notes + advice.hardware_advice(config.policy, machine, advice.layer_widths(list(models)),
                                                   config.batch)
    if gan.compile_mode == "off" and config.jit:
        notes.append(f"XLA is off: {gan.compile_reason}")
    decay = learning_rate_decay(config.arch)
    if decay and config.minutes is not None and layout["workers"] > 1:
        # Each worker would read its own clock, and the replicas' rates could differ for a step.
        notes.append("with several workers the preset's learning-rate decay needs --steps or --epochs; "
                     "with --minutes the rates stay constant")
        decay = None
    for line in notes:
        print(f"note: {line}")
    if replicas > 1 or layout["workers"] > 1:
        print(f"strategy {layout['strategy']}: {replicas} replicas on {layout['workers']} worker(s), "
              f"{config.batch // replicas} samples each; XLA: {gan.compile_mode}")
    checkpoints = runtime.checkpoints(gan, files_dir / "checkpoints", config.keep_checkpoints)
    resumed_from, earlier = None, []
    if resume:
        # Non-chief workers restore from the chief's folder (it must be on a file system they share).
        # The newest intact checkpoint; damaged newer ones are moved aside (by the chief).
        latest, earlier = checkpoints.restore(run_dir / "checkpoints", move_damaged=chief)
        if latest:
            resumed_from = {"step": int(gan.step.numpy()), "checkpoint": latest, "loss_scales": gan.loss_scales()}
    start_step = int(gan.step.numpy())
    steps = total_steps(config, len(data.images))
    if steps is not None and start_step >= steps:
        raise UserError(f"{run_dir} already reached step {start_step}; pass a larger --steps/--epochs to go on")
    write_run_files(files_dir, config, data)
    if resumed_from:
        print(f"resuming {run_dir} from step {start_step}")
    return Setup(runtime, data, run_dir, files_dir, chief, gan, machine, layout, notes, earlier, checkpoints,
                 resumed_from, start_step, steps, evaluator, decay)


# ---- The loop ----

class LoopOutcome(NamedTuple):
    status: str                 # "completed", "interrupted" or "diverged"
    message: Optional[str]
    signal: Optional[int]
    step: int                   # the last step trained
    final_metrics: dict         # the last step's metrics, read on the host
    clock: SessionClock         # this session's timing
    earlier_sessions: list      # session_record dicts of the sessions before this one
    loop_seconds: float


def train_loop(setup, config, started):
    """Runs steps until the length, --minutes, a stop signal or divergence; saves the last grid and
    checkpoint (unless diverged).

    The host enqueues a step and, every --log_every steps, reads the metrics of the step before (one
    copy; the device is already busy with the next one). Grids, evaluations and checkpoints read the
    step they follow; a checkpoint is never written after a non-finite step.
    """
    s, gan = setup, setup.gan
    batches = s.runtime.batches(s.data, config, gan.noise_dim, s.start_step)
    writer = SummaryWriter(s.files_dir / "tensorboard")
    grids = TrainingGrids(gan, s.files_dir, s.data.num_classes, config.seed, s.data.class_names, config.labels,
                          writer)
    progress = keras.utils.Progbar(s.steps, stateful_metrics=_STATEFUL, unit_name="step",
                                   verbose=1 if s.chief else 0)
    monitor = DivergenceMonitor(needs_loss_scaling(config.policy), config.max_skipped_in_a_row)
    deadline = None if config.minutes is None else started + config.minutes * 60.0
    clock = SessionClock()
    earlier = s.earlier_sessions
    last = {"step": None, "values": {}}
    decay = s.learning_rate_decay
    profiler = None
    if config.profile_steps and s.chief:
        profiler = StepWindow(config.profile_steps, s.files_dir / "profile",
                              title=f"{config.backend}, {config.policy}, batch {config.batch}",
                              hlo_text=getattr(gan, "compiled_hlo", None))

    def schedule_learning_rates(step, force=False):
        """The preset's decay: the rates' factor for this point of the run (of --steps/--epochs, or of
        this session's --minutes: a run has one of the two), assigned when it changes."""
        if not decay and not force:
            return
        if s.steps:
            progress = step / s.steps
        else:
            progress = (time.perf_counter() - started) / (config.minutes * 60.0) if deadline else None
        scale = learning_rate_scale(progress, decay)
        if force or scale != gan.learning_rate_scale:
            gan.set_learning_rate_scale(scale)
            if decay:
                writer.scalars({"learning_rate_scale": scale}, step)

    def read(step, metrics):
        """Copies one step's metrics to the host, logs them, checks them; a message if diverged."""
        if last["step"] == step:
            return None
        values = metrics.read()
        clock.synced()
        last.update(step=step, values=values)
        writer.scalars(values, step)
        progress.update(step, [(k, values[k]) for k in _SHOWN])
        return monitor.check(step, values)

    def save_checkpoint(step):
        record = session_record(clock, len(earlier), s.start_step, step, config, s.machine, s.layout)
        s.checkpoints.save(step, earlier + [record])  # a full disk: DiskFull, the previous checkpoint intact

    def due(every, step):
        return bool(every) and step % every == 0

    status, message, step, stop_signal, pending, metrics = "completed", None, s.start_step, None, None, None
    # compile (one step) -> warmup (--warmup_steps ordinary steps) -> bare (as many, back to back) -> timed
    phase, warmup_left = "compile", config.warmup_steps
    with writer, StopSignals() as signals:
        # Always: a restored checkpoint holds the rates its last step used, not this session's.
        schedule_learning_rates(step, force=True)
        loop_started = time.perf_counter()
        while True:
            if phase == "timed":
                clock.lap()
            if profiler:
                with clock.maintenance_of("profiling"):
                    profiler.before(step)
            ran = 0
            if phase == "bare":
                # -- steps back to back on batches fetched first: the bare device step, for comparison --
                phase = "timed"
                if pending is not None:  # logged in step order; the sync the window starts with anyway
                    message, pending = read(*pending), None
                step, metrics, window_message, ran = bare_window(gan, batches, step, metrics, config, s.steps,
                                                                 clock, read)
                message = message or window_message
            if not ran:
                # -- one step: enqueue it, then read the metrics of the logged step before it --
                metrics = gan.train_step(*next(batches))
                step += 1
                if phase == "compile":  # its own time, ending on a sync
                    message = read(step, metrics)
                    clock.compile_seconds = time.perf_counter() - loop_started
                    phase = "warmup"
                elif pending is not None:
                    message = read(*pending)
                pending = (step, metrics) if step % config.log_every == 0 else None
                if phase == "warmup":
                    warmup_left -= 1
                    if warmup_left < 0:
                        phase = "bare" if config.warmup_steps else "timed"
            if message:
                status = "diverged"
                break  # no checkpoint: the weights may already be non-finite

            schedule_learning_rates(step)
            if profiler:
                with clock.maintenance_of("profiling"):
                    if profiler.after(step, metrics.read):
                        print(f"\nprofile of steps {config.profile_steps}: {profiler.directory / 'profile.md'}")

            # -- grids, evaluation, checkpoints: each reads (and checks) the step it follows --
            sample, evaluate = due(config.sample_every, step), s.evaluator and due(config.eval_every, step)
            checkpoint = due(config.checkpoint_every, step)
            if sample or evaluate or checkpoint:
                message = read(step, metrics)
                if message:
                    status = "diverged"
                    break
                pending = None
            if sample:
                with clock.maintenance_of("grids"):
                    grids.save(step)
            if evaluate:
                with clock.maintenance_of("evaluation"):
                    s.evaluator.evaluate(gan, step, writer)
            if checkpoint:
                with clock.maintenance_of("checkpoints"):
                    save_checkpoint(step)

            # -- stop? --
            stop_signal, out_of_time = s.runtime.agree_on_stop(
                signals.received, bool(deadline and time.perf_counter() >= deadline))
            if stop_signal:
                status, message = "interrupted", f"stopped by {signal.Signals(stop_signal).name} at step {step}"
                break
            if (s.steps is not None and step >= s.steps) or out_of_time:
                break
        if status != "diverged":
            message_now = read(step, metrics)  # the last step's metrics; the sync that ends its interval
            if message_now:
                status, message = "diverged", message_now
        if phase == "timed":
            clock.stop()
        if profiler and metrics is not None:  # a session that ended inside the range: what it holds
            profiler.after(step, metrics.read, final=True)
        loop_seconds = time.perf_counter() - loop_started
        if status != "diverged":
            grids.save(step, name="final")
            if step % config.checkpoint_every:
                save_checkpoint(step)
    sys.stdout.write("\n")
    return LoopOutcome(status, message if status != "completed" else None, stop_signal, step, last["values"],
                       clock, earlier, loop_seconds)


def bare_window(gan, batches, step, metrics, config, last_step, clock, read):
    """Runs up to --warmup_steps steps back to back, their batches fetched first, and times them between
    two syncs: the bare device step (it follows the warm-up, so caches and autotuning have settled).
    Returns (step, its metrics, divergence message or None, steps run).

    The window stops short of a grid, evaluation or checkpoint step, so those happen after it at their
    exact step, and takes at most half of the steps left, so a short run still times its loop.
    """
    count = config.warmup_steps
    if last_step is not None:  # leave the loop at least as many steps to time
        count = min(count, (last_step - step) // 2)
    for every in (config.sample_every, config.eval_every, config.checkpoint_every):
        if every:
            count = min(count, every - step % every - 1)
    if count <= 0:
        return step, metrics, None, 0
    inputs = [next(batches) for _ in range(count)]
    if metrics is not None:
        metrics.read()  # the sync: the steps enqueued before (asynchronous on JAX and GPUs) are done
    started = time.perf_counter()
    results = [gan.train_step(*batch) for batch in inputs]
    results[-1].read()  # the sync: every enqueued step has finished
    clock.bare_step_seconds = (time.perf_counter() - started) / count
    message = None
    for offset, result in enumerate(results, start=1):
        if (step + offset) % config.log_every == 0 or offset == count:
            message = message or read(step + offset, result)
    return step + count, results[-1], message, count


# ---- The report ----

def assemble_report(setup, outcome, config, command, started):
    """report.json's content: settings, machine, this session's timing and cost, memory, the final state.

    Timing and cost are this session's alone; the sessions before a resume are listed apart (they may
    have run on another device, replica count or XLA setting), never blended in.
    """
    s, clock = setup, outcome.clock
    times = clock.summary(config.batch, s.runtime.replicas)
    earlier = outcome.earlier_sessions
    return {
        "run_dir": str(s.run_dir),
        "command": command or "acgan.training.loop.run",
        "status": outcome.status,
        "message": outcome.message,
        "config": dataclasses.asdict(config),
        "device": s.machine,
        "advice": s.notes,
        "backend": config.backend,
        "policy": config.policy,
        "jit": config.jit,
        "batch": config.batch,
        "learning_rates": dict(zip(OPTIMIZER_NAMES, s.gan.learning_rates)),  # what the step's optimizers use
        "q_learns_from_fakes": s.gan.q_learns_from_fakes,
        "g_learns_from_q": s.gan.g_learns_from_q,
        "learning_rate_decay": s.learning_rate_decay,  # the last fraction of the run they fall over
        "final_learning_rate_scale": s.gan.learning_rate_scale,
        "adam_beta_1": s.gan.beta_1,
        "diff_augment": list(s.gan.augment) if s.gan.augment else None,  # what D's inputs are augmented with
        "distribution": s.layout,
        "steps": outcome.step,
        "session_steps": outcome.step - s.start_step,
        "resumed_from": s.resumed_from,
        "warmup_steps": config.warmup_steps,
        "log_every": config.log_every,
        "compile_seconds": clock.compile_seconds,
        "compile_seconds_per_session": [e.get("compile_seconds") for e in earlier] + [clock.compile_seconds],
        "timing": times,
        "maintenance_seconds": dict(clock.maintenance),
        "earlier_sessions": earlier,
        "cost": run_report.run_cost(times.get("time_per_batch_ms"), config.price_per_hour, s.machine, s.layout),
        "arithmetic": run_report.run_arithmetic(s.gan, config, times, s.machine, s.layout),
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
