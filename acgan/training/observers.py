"""What watches the training loop without changing what it trains: the step timing and the profiler.

The loop runs one step per turn and tells its observers at named points:

    before_step(session)    the step's batch is not fetched yet
    after_read()            the host has just waited for the device (a metrics read)
    after_step(session)     after the step's reads and the learning rates
    train_ends(session)     after the last step's read (it sets session.loop_seconds)

and wraps the work it does besides training (grids, evaluations, checkpoints, profiling) in
the clock's `maintenance_of(kind)`, so the timing takes it out of the step time.

The timing: the first step is the compile step, timed from the loop's start to its read; --warmup_steps
ordinary steps follow, untimed; then every step is timed, loop top to loop top (session_timing.py says
what that time holds). The bare device step is timed apart, after the last step (loop.train_loop).
"""

import time

from acgan.measure.profile import StepWindow
from acgan.training.session_timing import SessionClock


class Observers:
    """The session's clock (SessionClock: the compile step, the untimed warm-up, then every step timed)
    and, with --profile_steps A:B, a profiler trace of steps A to B (measure/profile.py's StepWindow),
    started and stopped between steps, its time taken out of the step time. The clock is told first, so
    the profiler's work lands inside the step it follows and is taken out of it."""

    def __init__(self, setup, config):
        self.clock, self.started = SessionClock(), None
        self.untimed = setup.start_step + config.warmup_steps  # the compile step and the warm-up
        self.window = None
        if config.profile_steps and setup.runtime.chief:
            self.window = StepWindow(
                config.profile_steps,
                setup.files_dir / "profile",
                title=f"{config.backend}, {config.policy}, batch {config.batch}",
                hlo_text=setup.trainer.compiled_hlo,
            )

    def start(self):
        self.started = time.perf_counter()

    def before_step(self, session):
        if session.step > self.untimed:
            self.clock.lap()
        if self.window is not None:
            with self.clock.maintenance_of("profiling"):
                self.window.before(session.step)

    def after_read(self):
        # the compile step's read (at once): the sync that ends its time
        if self.clock.compile_seconds is None:
            self.clock.compile_seconds = time.perf_counter() - self.started
        self.clock.synced()

    def after_step(self, session):
        if self.window is not None:
            with self.clock.maintenance_of("profiling"):
                if self.window.after(session.step, session.metrics.read):
                    print(
                        f"\nprofile of steps {self.window.first}:{self.window.last}: "
                        f"{self.window.directory / 'profile.md'}"
                    )

    def train_ends(self, session):
        self.clock.stop()
        if self.window is not None:  # a session that ended inside the range: what it holds
            self.window.after(session.step, session.metrics.read, final=True)
        session.loop_seconds = time.perf_counter() - self.started
