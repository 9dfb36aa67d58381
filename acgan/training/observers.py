"""What watches the training loop without changing what it trains: the step timing and the profiler.

The loop runs one step per turn and tells its observers at named points:

    before_step(session)    the step's batch is not fetched yet
    after_read()            the host has just waited for the device (a metrics read)
    after_step(session)     after the step's reads and the learning rates
    train_ends(session)     after the last step's read

and wraps the work it does besides training (grids, evaluations, checkpoints, profiling) in
`maintenance(kind)`, so the timing takes it out of the step time.

StepTiming: the first step is the compile step, timed from the loop's start to its read; --warmup_steps
ordinary steps follow, untimed; then every step is timed, loop top to loop top (session_timing.py says
what that time holds). The bare device step is timed apart, after the last step (loop.train_loop).
"""

import time

from acgan.measure.profile import StepWindow
from acgan.training.session_timing import SessionClock


class Observer:
    """The named points, each doing nothing unless an observer overrides it (as keras.callbacks.Callback)."""

    def before_step(self, session):
        pass

    def after_read(self):
        pass

    def after_step(self, session):
        pass

    def train_ends(self, session):
        pass


class StepTiming(Observer):
    """The session's clock: the compile step, the untimed warm-up, then every step timed."""

    def __init__(self, config):
        self.config = config
        self.clock = SessionClock()
        self.started = None

    def start(self):
        self.started = time.perf_counter()

    def loop_seconds(self):
        return time.perf_counter() - self.started

    def before_step(self, session):
        if session.step - session.setup.start_step > self.config.warmup_steps:
            self.clock.lap()

    def after_read(self):
        # the compile step's read (at once): the sync that ends its time
        if self.clock.compile_seconds is None:
            self.clock.compile_seconds = time.perf_counter() - self.started
        self.clock.synced()

    def train_ends(self, session):
        self.clock.stop()

    def maintenance(self, kind):
        return self.clock.maintenance_of(kind)


class Profiling(Observer):
    """--profile_steps A:B: a profiler trace of steps A to B (measure/profile.py's StepWindow), started and
    stopped between steps, its time taken out of the step time."""

    def __init__(self, window, timing):
        self.window, self.timing = window, timing

    def before_step(self, session):
        with self.timing.maintenance("profiling"):
            self.window.before(session.step)

    def after_step(self, session):
        with self.timing.maintenance("profiling"):
            if self.window.after(session.step, session.metrics.read):
                print(
                    f"\nprofile of steps {self.window.first}:{self.window.last}: "
                    f"{self.window.directory / 'profile.md'}"
                )

    def train_ends(self, session):  # a session that ended inside the range: what it holds
        self.window.after(session.step, session.metrics.read, final=True)


class Observers(Observer):
    """The loop's observers, told in order; the timing first, so the work of the others lands inside the
    step it follows and is taken out of it."""

    def __init__(self, setup, config):
        self.timing = StepTiming(config)
        self.all = [self.timing]
        if config.profile_steps and setup.chief:
            window = StepWindow(
                config.profile_steps,
                setup.files_dir / "profile",
                title=f"{config.backend}, {config.policy}, batch {config.batch}",
                hlo_text=setup.trainer.compiled_hlo,
            )
            self.all.append(Profiling(window, self.timing))

    def before_step(self, session):
        for observer in self.all:
            observer.before_step(session)

    def after_read(self):
        for observer in self.all:
            observer.after_read()

    def after_step(self, session):
        for observer in self.all:
            observer.after_step(session)

    def train_ends(self, session):
        for observer in self.all:
            observer.train_ends(session)

    def maintenance(self, kind):
        return self.timing.maintenance(kind)
