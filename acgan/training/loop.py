"""The training loop: `run` reads the data, sets up (setup.py: models, step, restore, run files), trains
and writes the report; `train_loop` is the loop itself.

A run resumes from its folder: the checkpoint holds the models, the three optimizers (loss-scale
state included), the step and the timing history; the data stream and G's noise are rebuilt at the
restored step and the grid noise is a function of the seed. The backend's differences (strategy,
step, input stream, checkpoint files) sit behind a runtime: tf_runtime.py (any tf.distribute strategy;
under multi_worker only the chief keeps files) or jax_runtime.py (one device or a jax.sharding mesh;
under multi_worker only process 0 keeps files). What measures the loop (the step timing, the profiler)
watches it at named points of Session and changes nothing that is trained. This module imports neither
TensorFlow nor JAX.
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

from acgan.measure.profile import StepWindow
from acgan.measure.timing import bare_step_seconds
from acgan.model import jax_formulations, precision
from acgan.step.common import learning_rate_scale
from acgan.training import lost_worker, run_lock
from acgan.training import report as run_report
from acgan.training.health import divergence
from acgan.training.run_dir import prepare_run_dir
from acgan.training.sampling import TrainingGrids
from acgan.training.session_timing import SessionClock, session_record
from acgan.training.setup import load_data, make_runtime, set_up
from acgan.training.stop_signals import StopSignals
from acgan.training.tensorboard import SummaryWriter
from acgan.util import disk


class RunResult(NamedTuple):
    run_dir: Path
    status: str  # "completed", "interrupted" or "diverged"
    message: Optional[str] = None  # why it stopped early
    signal: Optional[int] = None  # the signal that interrupted it
    chief: bool = True  # False on multi-worker tasks whose files were discarded
    weights_fingerprint: Optional[str] = None
    step_seconds: tuple = ()  # this session's wall time per timed step


def run(config, command=None, make_evaluator=None):
    """Trains (or resumes) one AC-GAN as `config` says, under its dtype policy (set here, as Keras's global
    policy, before anything is built; a caller that must keep its own puts it back: api.train_with).

    make_evaluator: with --eval_every, builds the in-training evaluator from the config (the caller's:
    acgan.quality.evaluation.TrainingEvaluator; training does not import quality)."""
    config.validate()
    jax_formulations.use(config)
    precision.set_policy(config.policy)
    started = time.perf_counter()
    runtime = make_runtime(config)  # before anything touches a device
    # The preset it trains, resolved once ("auto" from the data's shape; --loss and the G-EMA settings
    # applied) and saved as such, so every reader rebuilds that one.
    data, preset = load_data(config)
    config = dataclasses.replace(
        config,
        arch=preset.name,
        loss=preset.loss,
        ema_decay=preset.ema_decay,
        ema_statistics=preset.ema_statistics,
    )
    run_dir, resume = prepare_run_dir(config, runtime.chief)
    # one writer per run folder (the chief); the kernel frees it if we die
    lock = run_lock.RunLock(run_dir)
    if runtime.chief:
        lock.acquire()
    # Every worker does the same work (reads of replicated state may be collective); only the chief's
    # files are kept. The others write into a scratch folder that is deleted at the end.
    files_dir = run_dir if runtime.chief else Path(tempfile.mkdtemp(prefix="acgan-worker-"))
    try:
        with disk.full_disk_stops_clearly(
            files_dir
        ):  # a full disk: DiskFull, one line, exit status 4
            setup = set_up(
                config, preset, runtime, data, run_dir, files_dir, resume, make_evaluator
            )
            outcome = train_loop(setup, config, started)
            report = run_report.assemble_report(setup, outcome, config, command, started)
            run_report.write_report(files_dir, report)
    finally:
        if not runtime.chief:
            shutil.rmtree(files_dir, ignore_errors=True)
        lock.release()
    runtime.wait_for_all_workers()
    return RunResult(
        run_dir,
        outcome.status,
        outcome.message,
        outcome.stop_signal,
        runtime.chief,
        outcome.weights_fingerprint,
        outcome.clock.intervals,
    )


def train_loop(setup, config, started):
    """Runs steps until the length, --minutes, a stop signal or divergence; saves the last grid and
    checkpoint (unless diverged); then, for a completed run, times the bare step apart. Returns the
    Session, its outcome (status, message, stop_signal, step, last_values, clock, loop_seconds,
    weights_fingerprint) read by the report.

    One step per turn: fetch its batch, update, then the work after it (Session.after_step): metric reads,
    learning rates, grids, evaluations, checkpoints, the stop signals; any of them can end the run. The
    timing and the profiler (Session.before_step, read, after_step) change nothing that is trained.
    """
    session = Session(setup, config, started)
    with session.writer, session.stop_signals:
        # Always: a restored checkpoint holds the rates its last step used, not this session's.
        session.schedule_learning_rates(force=True)
        session.loop_started = time.perf_counter()  # the compile step's time starts here
        going = True
        try:
            while going:
                session.before_step()
                session.batch = next(session.batches)
                going = session.after_step(setup.trainer.train_step(*session.batch))
        except (
            Exception
        ) as error:  # a collective that failed because a peer process is gone: one line
            lost = (
                lost_worker.lost_peer(error, setup.runtime.name, setup.runtime.peers())
                if config.strategy == "multi_worker"
                else None
            )
            if lost is None:
                raise
            raise lost_worker.stopped(
                lost,
                session.step,
                setup.run_dir,
                setup.runtime.chief,
                setup.runtime.newest_checkpoint,
            ) from None

        # -- the end: the last step's metrics, the final grid and checkpoint --
        session.read_last_step()  # the sync that ends its interval
        session.clock.lap()  # the end of the last timed interval
        if session.profiler is not None:  # a session that ended inside the range: what it holds
            session.profiler.after(session.step, session.metrics.read, final=True)
        session.loop_seconds = time.perf_counter() - session.loop_started
        if session.status != "diverged":  # no checkpoint: the weights may already be non-finite
            session.grids.save(session.step, name="final")
            if session.step % config.checkpoint_every:
                session.save_checkpoint()
    session.weights_fingerprint = setup.trainer.weights_fingerprint()
    if session.status == "completed" and config.warmup_steps:
        # The bare step: as many steps as the warm-up, back to back on the last batch, after everything
        # the run keeps is written (their updates are never saved); every worker runs them.
        session.clock.bare_step_seconds, _ = bare_step_seconds(
            setup.trainer, session.batch, config.warmup_steps
        )
    sys.stdout.write("\n")
    return session


# On the console: losses and accuracies averaged since the start, loss scale and skips as they are now.
_SHOWN = (
    "d_loss",
    "g_loss",
    "q_loss",
    "q_accuracy_real",
    "q_accuracy_fake",
    "g_loss_scale",
    "g_skipped",
)
_STATEFUL = ("g_loss_scale", "g_skipped")


class Session:
    """The steps of one session, and what train_loop carries from one to the next.

    The host enqueues a step and, every --log_every steps, reads the metrics of the step before (one
    copy; the device is already busy with the next one). Grids, evaluations and checkpoints read the
    step they follow; a checkpoint is never written after a non-finite step.

    The timing (session_timing.SessionClock): the first step is the compile step, timed from the loop's
    start to its read; --warmup_steps ordinary steps follow, untimed; then every step is timed, loop top
    to loop top. The bare device step is timed apart, after the last step (train_loop). With
    --profile_steps A:B, a profiler trace of steps A to B (measure/profile.py's StepWindow), started and
    stopped between steps. Grids, evaluations, checkpoints and profiling run inside the clock's
    `maintenance_of(kind)`, so the timing takes them out of the step time; the clock is told first, so
    the profiler's work lands inside the step it follows and is taken out of it.
    """

    def __init__(self, setup, config, started):
        s, trainer = setup, setup.trainer
        self.setup, self.config, self.trainer, self.started = setup, config, trainer, started
        self.batches = s.runtime.batches(s.data, config, trainer.noise_dim, s.start_step)
        self.writer = SummaryWriter(s.files_dir / "tensorboard")
        self.grids = TrainingGrids(
            trainer,
            s.files_dir,
            s.data.num_classes,
            config.seed,
            s.data.class_names,
            config.labels,
            self.writer,
        )
        self.progress = keras.utils.Progbar(
            s.steps,
            stateful_metrics=_STATEFUL,
            unit_name="step",
            verbose=1 if s.runtime.chief else 0,
        )
        self.deadline = None if config.minutes is None else started + config.minutes * 60.0
        self.stop_signals, self.clock = StopSignals(), SessionClock()
        self.untimed = s.start_step + config.warmup_steps  # the compile step and the warm-up
        self.profiler = None
        if config.profile_steps and s.runtime.chief:
            self.profiler = StepWindow(
                config.profile_steps,
                s.files_dir / "profile",
                title=f"{config.backend}, {config.policy}, batch {config.batch}",
                hlo_text=trainer.compiled_hlo,
            )
        self.step, self.metrics, self.batch = s.start_step, None, None
        self.pending = None  # (step, metrics) of a logged step not read yet
        self.last_read, self.last_values = None, {}
        self.status, self.message, self.stop_signal = "completed", None, None
        # train_loop's: when the loop (and the compile step's time) started, and how long it ran
        self.loop_started, self.loop_seconds = None, None

    def before_step(self):
        """At the top of each turn, before its batch is fetched: the clock's lap (past the compile step
        and the warm-up) and the profiler's start when its range begins."""
        if self.step > self.untimed:
            self.clock.lap()
        if self.profiler is not None:
            with self.clock.maintenance_of("profiling"):
                self.profiler.before(self.step)

    def after_step(self, metrics):
        """What follows every step (`metrics`: its metrics, not read yet): the reads, the divergence check,
        the learning rates, the profiler's stop, grids, evaluation and checkpoint when due, the stop
        signals. Returns whether to go on; status, message and stop_signal say why not."""
        if self._read_due(metrics):
            return False  # no checkpoint: the weights may already be non-finite
        config, step = self.config, self.step
        self.schedule_learning_rates()
        if self.profiler is not None:
            with self.clock.maintenance_of("profiling"):
                if self.profiler.after(step, self.metrics.read):
                    print(
                        f"\nprofile of steps {self.profiler.first}:{self.profiler.last}: "
                        f"{self.profiler.directory / 'profile.md'}"
                    )

        # -- grids, evaluation, checkpoints: each reads (and checks) the step it follows --
        sample, evaluate = (
            _due(config.sample_every, step),
            self.setup.evaluator and _due(config.eval_every, step),
        )
        checkpoint = _due(config.checkpoint_every, step)
        if sample or evaluate or checkpoint:
            if self._diverged(self.read(step, self.metrics)):
                return False
            self.pending = None
        if sample:
            with self.clock.maintenance_of("grids"):
                self.grids.save(step)
        if evaluate:
            with self.clock.maintenance_of("evaluation"):
                self.setup.evaluator.evaluate(self.trainer, step, self.writer)
            with self.clock.maintenance_of("checkpoints"):
                self.setup.best.offer(self.setup.evaluator.last, step, self._sessions())
        if checkpoint:
            with self.clock.maintenance_of("checkpoints"):
                self.save_checkpoint()

        # -- stop? --
        stop_signal, out_of_time = self.setup.runtime.agree_on_stop(
            self.stop_signals.received, bool(self.deadline and time.perf_counter() >= self.deadline)
        )
        if stop_signal:
            self.status, self.stop_signal = "interrupted", stop_signal
            self.message = f"stopped by {signal.Signals(stop_signal).name} at step {step}"
            return False
        return not ((self.setup.steps is not None and step >= self.setup.steps) or out_of_time)

    def _read_due(self, metrics):
        """Advances to the step just run and reads what is due, in step order: the logged step before it,
        then this one at once if it is the compile step (its read ends the compile time), or a step late
        when it is logged. True when a read found the run diverged."""
        self.step, self.metrics = self.step + 1, metrics
        pending, self.pending = self.pending, None
        message = self.read(*pending) if pending is not None else None
        if self.step == self.setup.start_step + 1:
            message = message or self.read(self.step, metrics)
        elif self.step % self.config.log_every == 0:
            self.pending = (self.step, metrics)  # read after the next step is enqueued
        return self._diverged(message)

    def _diverged(self, message):
        if message:
            self.status, self.message = "diverged", message
        return bool(message)

    def read_last_step(self):
        """After the loop: the last step's metrics (unless the run diverged), checked like any other."""
        if self.status != "diverged":
            self._diverged(self.read(self.step, self.metrics))

    def read(self, step, metrics):
        """Copies one step's metrics to the host, logs them, checks them; a message if diverged."""
        if self.last_read == step:
            return None
        values = metrics.read()
        # the host has just waited for the device; the compile step's read (at once) ends its time
        if self.clock.compile_seconds is None:
            self.clock.compile_seconds = time.perf_counter() - self.loop_started
        self.clock.synced()
        self.last_read, self.last_values = step, values
        self.writer.scalars(values, step)
        self.progress.update(step, [(k, values[k]) for k in _SHOWN])
        return divergence(
            step,
            values,
            precision.needs_loss_scaling(self.config.policy),
            self.config.max_skipped_in_a_row,
        )

    def schedule_learning_rates(self, force=False):
        """The preset's decay: the rates' factor for this point of the run (of --steps/--epochs, or of
        this session's --minutes: a run has one of the two), assigned when it changes."""
        decay = self.setup.learning_rate_decay
        if not decay and not force:
            return
        if self.setup.steps:
            progress = self.step / self.setup.steps
        else:
            progress = (
                (time.perf_counter() - self.started) / (self.config.minutes * 60.0)
                if self.deadline
                else None
            )
        scale = learning_rate_scale(progress, decay)
        if force or scale != self.trainer.learning_rate_scale:
            self.trainer.set_learning_rate_scale(scale)
            if decay:
                self.writer.scalars({"learning_rate_scale": scale}, self.step)

    def _sessions(self):
        """The timing history a checkpoint holds: the earlier sessions' records and this one's so far."""
        s = self.setup
        record = session_record(
            self.clock,
            len(s.earlier_sessions),
            s.start_step,
            self.step,
            self.config,
            s.machine,
            s.layout,
        )
        return s.earlier_sessions + [record]

    def save_checkpoint(self):
        # a full disk: DiskFull, the previous one intact
        self.setup.checkpoints.save(self.step, self._sessions())


def _due(every, step):
    return bool(every) and step % every == 0
