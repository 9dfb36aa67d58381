"""`pytest --cpu-times FILE`: each test's CPU seconds (its process and the child processes it waited for,
`resource.getrusage`) and wall seconds, from its setup to its teardown, written to FILE as JSON when the
run ends. The suite is CPU-bound, so CPU time says what a test costs where wall time also says what ran
beside it (docs/development.md#where-the-suites-time-goes). Under xdist the workers measure and the
controller writes. Each test also records when it started (seconds from the first test's start) and on
which worker, and FILE sums each worker's busy time and span: a worker idle at the end shows there."""

import json
import os
import resource
import time

import pytest

_started = {}  # nodeid -> (CPU seconds, wall seconds, epoch seconds) when its setup began, in its process
_measured = {}  # nodeid -> {"cpu", "wall", "start", "worker"}, in the process that writes FILE


def pytest_addoption(parser):
    parser.addoption(
        "--cpu-times",
        metavar="FILE",
        default=None,
        help="write each test's CPU and wall seconds (setup to teardown) to FILE as JSON",
    )


def _cpu_seconds():
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if item.config.getoption("cpu_times"):
        _started[item.nodeid] = (_cpu_seconds(), time.perf_counter(), time.time())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "teardown" and item.nodeid in _started:
        cpu, wall, start = _started.pop(item.nodeid)
        # user_properties travel with the report from an xdist worker to the controller.
        outcome.get_result().user_properties.append(
            (
                "cpu_times",
                {
                    "cpu": _cpu_seconds() - cpu,
                    "wall": time.perf_counter() - wall,
                    "start": start,
                    "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                },
            )
        )


def pytest_runtest_logreport(report):
    for name, value in report.user_properties:
        if name == "cpu_times":
            _measured[report.nodeid] = value


def pytest_sessionfinish(session):
    path = session.config.getoption("cpu_times")
    if path and not hasattr(
        session.config, "workerinput"
    ):  # the controller, or a run without xdist
        write(path, os.environ.get("KERAS_BACKEND", "tensorflow"), _measured)


def write(path, backend, measured):
    """This session's record into FILE's "sessions" under its backend, beside the other backend's session
    of the same `make test` (kept from the file as it stands); "total" sums the sessions."""
    tests = dict(sorted(measured.items(), key=lambda kv: -kv[1]["cpu"]))
    origin = min((t["start"] for t in tests.values()), default=0.0)
    workers = {}
    for t in tests.values():
        t["start"] -= origin
        w = workers.setdefault(
            t["worker"], {"tests": 0, "busy": 0.0, "first_start": t["start"], "last_end": 0.0}
        )
        w["tests"] += 1
        w["busy"] += t["wall"]
        w["first_start"] = min(w["first_start"], t["start"])
        w["last_end"] = max(w["last_end"], t["start"] + t["wall"])
    total = {
        "tests": len(tests),
        "cpu": sum(t["cpu"] for t in tests.values()),
        "wall": sum(t["wall"] for t in tests.values()),
        "span": max((w["last_end"] for w in workers.values()), default=0.0),
    }
    try:
        with open(path) as f:
            sessions = json.load(f).get("sessions", {})
    except (OSError, ValueError):
        sessions = {}
    sessions[backend] = {"total": total, "workers": dict(sorted(workers.items())), "tests": tests}
    summed = {
        key: sum(s["total"][key] for s in sessions.values())
        for key in ("tests", "cpu", "wall", "span")
    }
    with open(path, "w") as f:
        json.dump({"total": summed, "sessions": sessions}, f, indent=1)
