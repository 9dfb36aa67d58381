"""The training loop: `run` reads the data, sets up (models, step, restore, run files), trains and writes
the report. The loop itself (`train_loop`) reads top to bottom: the compile step, the warm-up, the
bare-step window, the timed steps, each step followed by the same work (grids, TensorBoard,
checkpoints, stop signals), then the end (the last grid and checkpoint).

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
from acgan.presets import adversarial_loss, ema_decay, learning_rate_decay
from acgan.step.common import learning_rate_scale
from acgan.training import report as run_report
from acgan.training import run_lock
from acgan.training.health import DivergenceMonitor
from acgan.training.report_content import assemble_report
from acgan.training.run_dir import prepare_run_dir, write_run_files
from acgan.training.sampling import TrainingGrids
from acgan.training.session_timing import SessionClock, session_record
from acgan.training.stop_signals import StopSignals
from acgan.training.tensorboard import SummaryWriter
from acgan.util import disk


def make_runtime(config):
    """The backend's runtime for this run: Keras must already run on config.backend."""
    running = keras.backend.backend()
    if running != config.backend:
        raise RuntimeError(f"Keras runs on {running}, the run asks for {config.backend} (acgan.backend.use first)")
    # Here, not at the top: each runtime loads its framework, and a run loads only its own.
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
    config = dataclasses.replace(config, arch=arch, loss=adversarial_loss(arch, config.loss),
                                 ema_decay=ema_decay(arch, config.ema_decay))
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


# ---- Set-up: models, step, checkpoint restore, run files ----

@dataclasses.dataclass
class Setup:
    """Everything the loop and the report need, built once before the first step."""
    runtime: object               # tf_runtime.TensorFlowRuntime or jax_runtime.JaxRuntime
    data: object
    run_dir: Path
    files_dir: Path               # run_dir on the chief; a scratch folder on other workers
    chief: bool
    gan: object                   # the backend's step (tf_step.TensorFlowStep or jax_step.JaxStep)
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
                                                   config.batch, xla=gan.compile_mode != "off")
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

    In order: the compile step (its own time), --warmup_steps steps left out of the timing, a window of
    as many steps back to back that times the bare device step, then the timed steps (wall time per
    step). Every step, in any of them, is followed by the same work (SessionSteps.after_step): learning
    rates, grids, evaluations, checkpoints, the stop signals; any of them can end the run.
    """
    session = SessionSteps(setup, config, started)
    clock = session.clock
    with session.writer, session.stop_signals:
        # Always: a restored checkpoint holds the rates its last step used, not this session's.
        session.schedule_learning_rates(force=True)
        loop_started = time.perf_counter()

        # -- the compile step: its own time, ending on a sync --
        message = session.one_step(read_now=True)
        clock.compile_seconds = time.perf_counter() - loop_started
        going = session.after_step(message)

        # -- the warm-up: ordinary steps, untimed, so that caches and autotuning settle --
        for _ in range(config.warmup_steps):
            if not going:
                break
            going = session.after_step(session.one_step())

        # -- the bare step: as many steps again, back to back, for comparison --
        if going and config.warmup_steps:
            going = session.after_step(session.bare_step_window())

        # -- the timed steps: wall time per step, loop top to loop top --
        while going:
            clock.lap()
            going = session.after_step(session.one_step())

        # -- the end: the last step's metrics, the final grid and checkpoint --
        session.read_last_step()  # the sync that ends its interval
        clock.stop()
        if session.profiler:  # a session that ended inside the range: what it holds
            session.profiler.after(session.step, session.metrics.read, final=True)
        loop_seconds = time.perf_counter() - loop_started
        if session.status != "diverged":  # no checkpoint: the weights may already be non-finite
            session.grids.save(session.step, name="final")
            if session.step % config.checkpoint_every:
                session.save_checkpoint()
    sys.stdout.write("\n")
    return LoopOutcome(session.status, session.message, session.stop_signal, session.step, session.last_values, clock,
                       setup.earlier_sessions, loop_seconds)


# On the console: losses and accuracies averaged since the start, loss scale and skips as they are now.
_SHOWN = ("d_loss", "g_loss", "q_loss", "q_accuracy_real", "q_accuracy_fake", "g_loss_scale", "g_skipped")
_STATEFUL = ("g_loss_scale", "g_skipped")


class SessionSteps:
    """The steps of one session, and what train_loop carries from one to the next.

    The host enqueues a step and, every --log_every steps, reads the metrics of the step before (one
    copy; the device is already busy with the next one). Grids, evaluations and checkpoints read the
    step they follow; a checkpoint is never written after a non-finite step.
    """

    def __init__(self, setup, config, started):
        s, gan = setup, setup.gan
        self.setup, self.config, self.gan, self.started = setup, config, gan, started
        self.batches = s.runtime.batches(s.data, config, gan.noise_dim, s.start_step)
        self.writer = SummaryWriter(s.files_dir / "tensorboard")
        self.grids = TrainingGrids(gan, s.files_dir, s.data.num_classes, config.seed, s.data.class_names,
                                   config.labels, self.writer)
        self.progress = keras.utils.Progbar(s.steps, stateful_metrics=_STATEFUL, unit_name="step",
                                            verbose=1 if s.chief else 0)
        self.monitor = DivergenceMonitor(needs_loss_scaling(config.policy), config.max_skipped_in_a_row)
        self.deadline = None if config.minutes is None else started + config.minutes * 60.0
        self.clock = SessionClock()
        self.profiler = None
        if config.profile_steps and s.chief:
            self.profiler = StepWindow(config.profile_steps, s.files_dir / "profile",
                                       title=f"{config.backend}, {config.policy}, batch {config.batch}",
                                       hlo_text=gan.compiled_hlo)
        self.stop_signals = StopSignals()
        self.step, self.metrics = s.start_step, None
        self.pending = None                    # (step, metrics) of a logged step not read yet
        self.last_read, self.last_values = None, {}
        self.status, self.message, self.stop_signal = "completed", None, None

    def one_step(self, read_now=False):
        """Enqueues one step, then reads the metrics of the logged step before it (read_now: this step's,
        a sync). Returns a divergence message or None."""
        self._profile_before()
        return self._enqueue(read_now)

    def _enqueue(self, read_now=False):
        self.metrics = self.gan.train_step(*next(self.batches))
        self.step += 1
        message = self.read(self.step, self.metrics) if read_now else self._read_pending()
        self.pending = (self.step, self.metrics) if self.step % self.config.log_every == 0 else None
        return message

    def bare_step_window(self):
        """Up to --warmup_steps steps back to back on batches fetched first, timed between two syncs: the
        bare device step (it follows the warm-up, so caches and autotuning have settled). Returns a
        divergence message or None.

        The window stops short of a grid, evaluation or checkpoint step, so those happen after it at their
        exact step, and takes at most half of the steps left, so a short run still times its loop. Where
        no step fits, one ordinary step runs in its place, untimed like the warm-up.
        """
        config, first = self.config, self.step
        self._profile_before()
        message = self._read_pending()  # logged in step order; the sync the window starts with anyway
        count = config.warmup_steps
        if self.setup.steps is not None:  # leave the loop at least as many steps to time
            count = min(count, (self.setup.steps - first) // 2)
        for every in (config.sample_every, config.eval_every, config.checkpoint_every):
            if every:
                count = min(count, every - first % every - 1)
        if count <= 0:
            self._enqueue()
            return message
        inputs = [next(self.batches) for _ in range(count)]
        self.metrics.read()  # the sync: the steps enqueued before (asynchronous on JAX and GPUs) are done
        window_started = time.perf_counter()
        results = [self.gan.train_step(*batch) for batch in inputs]
        results[-1].read()  # the sync: every enqueued step has finished
        self.clock.bare_step_seconds = (time.perf_counter() - window_started) / count
        window_message = None
        for offset, result in enumerate(results, start=1):
            if (first + offset) % config.log_every == 0 or offset == count:
                window_message = window_message or self.read(first + offset, result)
        self.step, self.metrics = first + count, results[-1]
        return message or window_message

    def after_step(self, message):
        """What follows every step: the divergence check of its read, the learning rates, the profiler,
        grids, evaluation and checkpoint when due, the stop signals. Returns whether to go on; status,
        message and stop_signal say why not."""
        config, step = self.config, self.step
        if message:
            self.status, self.message = "diverged", message
            return False  # no checkpoint: the weights may already be non-finite
        self.schedule_learning_rates()
        if self.profiler:
            with self.clock.maintenance_of("profiling"):
                if self.profiler.after(step, self.metrics.read):
                    print(f"\nprofile of steps {config.profile_steps}: {self.profiler.directory / 'profile.md'}")

        # -- grids, evaluation, checkpoints: each reads (and checks) the step it follows --
        sample, evaluate = _due(config.sample_every, step), self.setup.evaluator and _due(config.eval_every, step)
        checkpoint = _due(config.checkpoint_every, step)
        if sample or evaluate or checkpoint:
            message = self.read(step, self.metrics)
            if message:
                self.status, self.message = "diverged", message
                return False
            self.pending = None
        if sample:
            with self.clock.maintenance_of("grids"):
                self.grids.save(step)
        if evaluate:
            with self.clock.maintenance_of("evaluation"):
                self.setup.evaluator.evaluate(self.gan, step, self.writer)
        if checkpoint:
            with self.clock.maintenance_of("checkpoints"):
                self.save_checkpoint()

        # -- stop? --
        stop_signal, out_of_time = self.setup.runtime.agree_on_stop(
            self.stop_signals.received, bool(self.deadline and time.perf_counter() >= self.deadline))
        if stop_signal:
            self.status, self.stop_signal = "interrupted", stop_signal
            self.message = f"stopped by {signal.Signals(stop_signal).name} at step {step}"
            return False
        return not ((self.setup.steps is not None and step >= self.setup.steps) or out_of_time)

    def read_last_step(self):
        """After the loop: the last step's metrics (unless the run diverged), checked like any other."""
        if self.status != "diverged":
            message = self.read(self.step, self.metrics)
            if message:
                self.status, self.message = "diverged", message

    def read(self, step, metrics):
        """Copies one step's metrics to the host, logs them, checks them; a message if diverged."""
        if self.last_read == step:
            return None
        values = metrics.read()
        self.clock.synced()
        self.last_read, self.last_values = step, values
        self.writer.scalars(values, step)
        self.progress.update(step, [(k, values[k]) for k in _SHOWN])
        return self.monitor.check(step, values)

    def _read_pending(self):
        pending, self.pending = self.pending, None
        return self.read(*pending) if pending is not None else None

    def _profile_before(self):
        if self.profiler:
            with self.clock.maintenance_of("profiling"):
                self.profiler.before(self.step)

    def schedule_learning_rates(self, force=False):
        """The preset's decay: the rates' factor for this point of the run (of --steps/--epochs, or of
        this session's --minutes: a run has one of the two), assigned when it changes."""
        decay = self.setup.learning_rate_decay
        if not decay and not force:
            return
        if self.setup.steps:
            progress = self.step / self.setup.steps
        else:
            progress = (time.perf_counter() - self.started) / (self.config.minutes * 60.0) if self.deadline else None
        scale = learning_rate_scale(progress, decay)
        if force or scale != self.gan.learning_rate_scale:
            self.gan.set_learning_rate_scale(scale)
            if decay:
                self.writer.scalars({"learning_rate_scale": scale}, self.step)

    def save_checkpoint(self):
        s = self.setup
        record = session_record(self.clock, len(s.earlier_sessions), s.start_step, self.step, self.config,
                                s.machine, s.layout)
        s.checkpoints.save(self.step, s.earlier_sessions + [record])  # a full disk: DiskFull, the previous one intact


def _due(every, step):
    return bool(every) and step % every == 0
