"""A clean stop on SIGINT and SIGTERM: the run keeps its checkpoint and report instead of dying mid-step."""

import signal
import threading


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
