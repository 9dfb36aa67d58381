"""SessionClock: the mean over every timed step, the spread over the windows between metric reads."""
import pytest

from acgan.training import session_timing


def test_spread_is_over_read_to_read_windows(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(session_timing.time, "perf_counter", lambda: now[0])
    clock = session_timing.SessionClock()
    # An asynchronous backend: steps return at once and the read waits for all of them.
    for seconds, read in [(0.001, False), (0.001, False), (0.001, False), (7.997, True), (0.5, False), (1.5, True)]:
        clock.lap()  # the loop's top
        now[0] += seconds
        if read:
            clock.synced()
    clock.stop()
    figures = clock.summary(batch=10, replicas=1)
    assert figures["measured_steps"] == 6 and figures["spread_windows"] == 2
    assert figures["time_per_batch_ms"] == pytest.approx(10_000 / 6)
    assert figures["time_per_batch_min_ms"] == pytest.approx(1000) and figures["time_per_batch_max_ms"] == pytest.approx(2000)
    assert figures["time_per_batch_median_ms"] == pytest.approx(1500)


def test_maintenance_is_taken_out_of_its_interval(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(session_timing.time, "perf_counter", lambda: now[0])
    clock = session_timing.SessionClock()
    clock.lap()
    now[0] += 1.0
    with clock.maintenance_of("checkpoints"):
        now[0] += 3.0
    clock.synced()
    clock.stop()
    assert clock.intervals == [1.0] and clock.maintenance == {"checkpoints": 3.0}
    assert clock.summary(batch=1, replicas=1)["spread_windows"] == 1
