"""The timing of one training session (one process's run, from start or from a resume).

What a user waits for and pays for is wall time per iteration, loop top to loop top: the step, the
input pipeline, metric reads, TensorBoard, the progress bar. Only grids, evaluations and checkpoints
are taken out (and reported on their own). As many steps as the warm-up, run back to back after it on
batches fetched beforehand, time the bare device step for comparison.

The host waits for the device only when it reads metrics (every --log_every steps, and before grids,
evaluations and checkpoints); between reads it only enqueues steps, where the backend lets it (JAX, or
TensorFlow on a GPU). A single iteration's time then says where the host waited, not how long a step
took, so the spread (median, min, max) is taken over read-to-read windows: each window's wall time
divided by its steps. The mean is the same either way.
"""

import collections
import contextlib
import time

from acgan.measure import timing


class SessionClock:
    def __init__(self):
        self.compile_seconds = None
        self.bare_step_seconds = None  # mean of the steps run back to back after the warm-up
        self.intervals = []  # one per timed step, seconds
        self.windows = []  # (seconds, steps) from one metrics read to the next
        self._window = [0.0, 0]
        self._synced = False
        # "grids" / "evaluation" / "checkpoints": seconds
        self.maintenance = collections.defaultdict(float)
        self._top = None
        self._taken_out = 0.0

    def lap(self):
        """At the top of each timed iteration, and once after the last (the interval it opens then is
        never closed: nothing laps after it): closes the previous interval."""
        now = time.perf_counter()
        if self._top is not None:
            interval = now - self._top - self._taken_out
            self.intervals.append(interval)
            self._window[0] += interval
            self._window[1] += 1
            if self._synced:  # the interval that held a read closes its window
                self.windows.append(tuple(self._window))
                self._window = [0.0, 0]
        self._synced = False
        self._top, self._taken_out = now, 0.0

    def synced(self):
        """The host has just waited for the device (a metrics read): the current interval ends a window."""
        self._synced = True

    @contextlib.contextmanager
    def maintenance_of(self, what):
        started = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - started
            self.maintenance[what] += spent
            self._taken_out += spent

    def summary(self, batch, replicas):
        """The session's figures: timing_summary of the wall intervals (its spread over the read-to-read
        windows), plus the bare step and the ratio."""
        windows = self.windows + ([tuple(self._window)] if self._window[1] else [])
        figures = timing.timing_summary(
            self.intervals,
            batch,
            replicas,
            window_means=[seconds / steps for seconds, steps in windows],
        )
        bare_ms = None if self.bare_step_seconds is None else self.bare_step_seconds * 1e3
        figures["bare_step_ms"] = bare_ms
        wall_ms = figures.get("time_per_batch_ms")
        figures["wall_over_bare"] = wall_ms / bare_ms if wall_ms and bare_ms else None
        return figures


def session_record(clock, index, start_step, end_step, config, machine, layout):
    """What the checkpoint keeps of a session, so a resumed run lists it apart from its own figures."""
    return {
        "session": index,
        "start_step": start_step,
        "end_step": end_step,
        "device": machine["name"],
        "device_kind": machine["kind"],
        "strategy": layout["strategy"],
        "replicas": layout["replicas"],
        "workers": layout["workers"],
        "xla": layout["xla"],
        "compile_seconds": clock.compile_seconds,
        "timing": clock.summary(config.batch, layout["replicas"]),
        "maintenance_seconds": dict(clock.maintenance),
    }
