"""What watches the training loop without changing what it trains: the step timing and the profiler.

The loop runs steps in blocks, usually of one step, and tells its observers at named points:

    before_block(session, block)            the block's batches are not fetched yet
    before_updates(session, block)          its batches are fetched; the updates come next
    after_updates(session, block, results)  its steps are enqueued (not necessarily finished)
    after_read()                            the host has just waited for the device (a metrics read)
    after_block(session)                    after the block's reads and the learning rates
    train_ends(session)                     after the last step's read

and wraps the work it does besides training (grids, evaluations, checkpoints, profiling) in
`maintenance(kind)`, so the timing takes it out of the step time.

StepTiming also plans the blocks: the first step is the compile step, timed on its own; --warmup_steps
ordinary steps follow, untimed; then one block of as many steps again runs back to back on batches
fetched first, timed between two syncs (the bare device step); then every step is timed, loop top to
loop top (session_timing.py says what that time holds).
"""

import time
from typing import NamedTuple

from acgan.measure.profile import StepWindow
from acgan.training.session_timing import SessionClock


class Block(NamedTuple):
    steps: int  # how many steps run back to back
    kind: str  # "compile", "warm-up", "bare" (the bare-step window) or "timed"
    read_now: bool  # read the last step's metrics at once (a sync), not a step late


class Observer:
    """The named points, each doing nothing unless an observer overrides it (as keras.callbacks.Callback)."""

    def before_block(self, session, block):
        pass

    def before_updates(self, session, block):
        pass

    def after_updates(self, session, block, results):
        pass

    def after_read(self):
        pass

    def after_block(self, session):
        pass

    def train_ends(self, session):
        pass


class StepTiming(Observer):
    """The session's clock, and the plan of its blocks (see the module's docstring)."""

    def __init__(self, config, steps):
        # steps: the step to stop at, or None under --minutes
        self.config, self.steps = (
            config,
            steps,
        )
        self.clock = SessionClock()
        self.blocks = 0
        self.started = self._window_started = None

    def start(self):
        self.started = time.perf_counter()

    def loop_seconds(self):
        return time.perf_counter() - self.started

    def next_block(self, step):
        """The block that starts after `step`."""
        self.blocks += 1
        warmup = self.config.warmup_steps
        if self.blocks == 1:
            return Block(1, "compile", read_now=True)
        if self.blocks <= 1 + warmup:
            return Block(1, "warm-up", read_now=False)
        if self.blocks == 2 + warmup and warmup:
            count = self._window_size(step)
            # Where no step fits, one ordinary step runs in its place, untimed like the warm-up.
            return (
                Block(count, "bare", read_now=True)
                if count > 0
                else Block(1, "warm-up", read_now=False)
            )
        return Block(1, "timed", read_now=False)

    def _window_size(self, step):
        """Up to --warmup_steps steps, stopping short of a grid, evaluation or checkpoint step (so those
        happen after the window at their exact step), and at most half of the steps left (so a short run
        still times its loop)."""
        config, count = self.config, self.config.warmup_steps
        if self.steps is not None:
            count = min(count, (self.steps - step) // 2)
        for every in (config.sample_every, config.eval_every, config.checkpoint_every):
            if every:
                count = min(count, every - step % every - 1)
        return count

    def before_block(self, session, block):
        if block.kind == "timed":
            self.clock.lap()

    def before_updates(self, session, block):
        if block.kind == "bare":
            session.metrics.read()  # the sync: the steps enqueued before (asynchronous on JAX and GPUs) are done
            self._window_started = time.perf_counter()

    def after_updates(self, session, block, results):
        if block.kind == "bare":
            results[-1].read()  # the sync: every enqueued step has finished
            self.clock.bare_step_seconds = (
                time.perf_counter() - self._window_started
            ) / block.steps

    def after_read(self):
        if (
            self.clock.compile_seconds is None
        ):  # the compile step's read (read_now): the sync that ends its time
            self.clock.compile_seconds = time.perf_counter() - self.started
        self.clock.synced()

    def train_ends(self, session):
        self.clock.stop()

    def maintenance(self, kind):
        return self.clock.maintenance_of(kind)


class Profiling(Observer):
    """--profile_steps A:B: a profiler trace of steps A to B (measure/profile.py's StepWindow), started and
    stopped between blocks, its time taken out of the step time."""

    def __init__(self, window, timing):
        self.window, self.timing = window, timing

    def before_block(self, session, block):
        with self.timing.maintenance("profiling"):
            self.window.before(session.step)

    def after_block(self, session):
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
        self.timing = StepTiming(config, setup.steps)
        self.all = [self.timing]
        if config.profile_steps and setup.chief:
            window = StepWindow(
                config.profile_steps,
                setup.files_dir / "profile",
                title=f"{config.backend}, {config.policy}, batch {config.batch}",
                hlo_text=setup.trainer.compiled_hlo,
            )
            self.all.append(Profiling(window, self.timing))

    def before_block(self, session, block):
        for observer in self.all:
            observer.before_block(session, block)

    def before_updates(self, session, block):
        for observer in self.all:
            observer.before_updates(session, block)

    def after_updates(self, session, block, results):
        for observer in self.all:
            observer.after_updates(session, block, results)

    def after_read(self):
        for observer in self.all:
            observer.after_read()

    def after_block(self, session):
        for observer in self.all:
            observer.after_block(session)

    def train_ends(self, session):
        for observer in self.all:
            observer.train_ends(session)

    def maintenance(self, kind):
        return self.timing.maintenance(kind)
