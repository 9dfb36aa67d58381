"""SessionClock: the mean over every timed step, the spread over the windows between metric reads; and the
loop's order: which steps it compiles on, warms up with, runs back to back for the bare step, and times."""

import pytest

from acgan.training import session_timing


def test_spread_is_over_read_to_read_windows(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(session_timing.time, "perf_counter", lambda: now[0])
    clock = session_timing.SessionClock()
    # An asynchronous backend: steps return at once and the read waits for all of them.
    for seconds, read in [
        (0.001, False),
        (0.001, False),
        (0.001, False),
        (7.997, True),
        (0.5, False),
        (1.5, True),
    ]:
        clock.lap()  # the loop's top
        now[0] += seconds
        if read:
            clock.synced()
    clock.lap()  # after the last step
    figures = clock.summary(batch=10, replicas=1)
    assert figures["measured_steps"] == 6 and figures["spread_windows"] == 2
    assert figures["time_per_batch_ms"] == pytest.approx(10_000 / 6)
    assert figures["time_per_batch_min_ms"] == pytest.approx(1000) and figures[
        "time_per_batch_max_ms"
    ] == pytest.approx(2000)
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
    clock.lap()  # after the last step
    assert clock.intervals == [1.0] and clock.maintenance == {"checkpoints": 3.0}
    assert clock.summary(batch=1, replicas=1)["spread_windows"] == 1


def test_the_end_before_any_timed_step_times_nothing():
    clock = session_timing.SessionClock()
    clock.lap()  # the loop's end, in a session that ended in its warm-up
    assert clock.intervals == [] and clock.summary(batch=1, replicas=1) == {
        "measured_steps": 0,
        "bare_step_ms": None,
        "wall_over_bare": None,
    }


class _Metrics:
    def __init__(self, step, events):
        self.step, self.events = step, events

    def read(self):
        self.events.append(("read", self.step))
        return {
            "d_loss": 1.0,
            "g_loss": 1.0,
            "q_loss": 1.0,
            "q_accuracy_real": 0.5,
            "q_accuracy_fake": 0.5,
            "g_loss_scale": 1.0,
            "g_skipped": 0.0,
        }


class _Step:
    """The step interface as far as the loop uses it, recording what it is asked to do."""

    noise_dim, learning_rate_scale = 4, 1.0

    def __init__(self, events):
        self.events, self.step = events, 0

    def train_step(self, *batch):
        self.step += 1
        self.events.append(("step", self.step))
        return _Metrics(self.step, self.events)

    def set_learning_rate_scale(self, scale):
        self.learning_rate_scale = scale

    def weights_fingerprint(self):
        return f"fingerprint of step {self.step}"


class _Runtime:
    chief = False

    def __init__(self, events):
        self.events = events

    def batches(self, data, config, noise_dim, start_step):
        while True:
            self.events.append(("batch",))
            yield ()

    def agree_on_stop(self, stop_signal, out_of_time):
        return stop_signal, out_of_time


class _Checkpoints:
    def __init__(self, events):
        self.events = events

    def save(self, step, sessions):
        self.events.append(("checkpoint", step, sessions[-1]["timing"]["measured_steps"]))


class _Grids:
    def __init__(self, *args):
        pass

    def save(self, step, name=None):
        pass


def test_the_loop_runs_compile_warm_up_timed_steps_then_times_the_bare_step(tmp_path, monkeypatch):
    """12 steps, --warmup_steps 2, --log_every 3, --checkpoint_every 8: the compile step (read at once), two
    warm-up steps, nine timed steps, metrics read a step late except before a checkpoint and at the end;
    then, after the last checkpoint, the bare step: two more steps back to back on the last batch, timed
    to their read, which no checkpoint keeps."""
    import types

    from acgan.config import Config
    from acgan.training import loop, setup

    monkeypatch.setattr(loop, "TrainingGrids", _Grids)
    events = []
    config = Config(
        steps=12, batch=8, warmup_steps=2, log_every=3, checkpoint_every=8, sample_every=None
    )
    data = types.SimpleNamespace(num_classes=2, class_names=["a", "b"])
    machine = {"name": "cpu", "kind": "CPU"}
    layout = {"strategy": "default", "replicas": 1, "workers": 1, "xla": "off"}
    ready = setup.Setup(
        runtime=_Runtime(events),
        data=data,
        run_dir=tmp_path,
        files_dir=tmp_path,
        trainer=_Step(events),
        machine=machine,
        layout=layout,
        notes=[],
        earlier_sessions=[],
        checkpoints=_Checkpoints(events),
        best=None,  # no evaluator: nothing is judged best
        resumed_from=None,
        start_step=0,
        steps=12,
        evaluator=None,
        learning_rate_decay=None,
    )
    outcome = loop.train_loop(ready, config, started=0.0)
    assert outcome.status == "completed" and outcome.step == 12
    assert [e[1] for e in events if e[0] == "read"] == [1, 3, 6, 8, 9, 12, 14]
    # Timed: steps 4 to 12 (the checkpoint at step 8 saw steps 4 to 7; the one at the end, all nine).
    assert [e for e in events if e[0] == "checkpoint"] == [
        ("checkpoint", 8, 4),
        ("checkpoint", 12, 9),
    ]
    # The bare step after the last checkpoint: no batch fetched, two steps, their read.
    assert events[events.index(("checkpoint", 12, 9)) + 1 :] == [
        ("step", 13),
        ("step", 14),
        ("read", 14),
    ]
    assert len(outcome.clock.intervals) == 9 and outcome.clock.bare_step_seconds is not None
    assert outcome.clock.compile_seconds is not None
    assert outcome.weights_fingerprint == "fingerprint of step 12"
