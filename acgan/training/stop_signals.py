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


def agree(received, out_of_time, processes, any_of):
    """(signal, out of time?) as every process acts on them: any process's reason to stop is everyone's.

    A signal reaches one process and each clock runs its own, but a process that stops alone leaves the
    others waiting on its next collective. any_of: [SIGINT?, SIGTERM?, out of time?] -> whether any
    process has each (a collective), not called when there is one process. SIGINT wins over SIGTERM.
    """
    if processes == 1:
        return received, out_of_time
    shared = any_of([received == signal.SIGINT, received == signal.SIGTERM, out_of_time])
    return signal.SIGINT if shared[0] else signal.SIGTERM if shared[1] else None, bool(shared[2])
