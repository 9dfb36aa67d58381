"""`pytest --cpu-times FILE` (tests/cpu_times.py), on a small suite of its own, alone and under xdist."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cpu_times

TESTS = Path(__file__).resolve().parent
INNER = """
import subprocess, sys, time

def test_busy():
    sum(range(5_000_000))

def test_sleeps():
    time.sleep(0.5)

def test_child_process():
    subprocess.run([sys.executable, "-c", "sum(range(20_000_000))"], check=True)
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_cpu_times_holds_every_test_with_its_cpu_and_wall_seconds(workers, tmp_path):
    (tmp_path / "test_inner.py").write_text(INNER)
    out = tmp_path / "times.json"
    # not the outer run's worker
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(TESTS)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "cpu_times",
            "-p",
            "no:cacheprovider",
            *workers,
            "--cpu-times",
            str(out),
            "test_inner.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (doc,) = json.loads(out.read_text())["sessions"].values()
    tests = {name.split("::")[-1]: t for name, t in doc["tests"].items()}
    assert (
        sorted(tests) == ["test_busy", "test_child_process", "test_sleeps"]
        and doc["total"]["tests"] == 3
    )
    # waiting is not CPU time
    assert tests["test_sleeps"]["wall"] >= 0.5 > tests["test_sleeps"]["cpu"]
    assert tests["test_busy"]["cpu"] > 0.02
    # The child's CPU time counts: 20 million additions are well over the interpreter's start-up.
    assert tests["test_child_process"]["cpu"] > 0.2
    # costliest first
    assert list(doc["tests"]) == sorted(doc["tests"], key=lambda n: -doc["tests"][n]["cpu"])
    assert doc["total"]["cpu"] == pytest.approx(sum(t["cpu"] for t in tests.values()))
    # When and where: starts from the first test's, and per worker its busy time within its span.
    assert min(t["start"] for t in tests.values()) == 0.0
    assert sorted(doc["workers"]) == (["gw0", "gw1"] if workers else ["main"])
    assert sum(w["tests"] for w in doc["workers"].values()) == 3
    for name, w in doc["workers"].items():
        mine = [t for t in tests.values() if t["worker"] == name]
        assert w["busy"] == pytest.approx(sum(t["wall"] for t in mine))
        # tests on one worker never overlap
        assert w["first_start"] <= w["last_end"] - w["busy"] + 1e-6


def test_each_backends_session_is_a_section_and_the_total_their_sum(tmp_path):
    out = tmp_path / "times.json"
    cpu_times.write(
        out, "tensorflow", {"a::t": {"cpu": 2.0, "wall": 3.0, "start": 10.0, "worker": "gw0"}}
    )
    cpu_times.write(
        out,
        "jax",
        {
            "b::t": {"cpu": 1.0, "wall": 1.5, "start": 20.0, "worker": "gw1"},
            "b::u": {"cpu": 4.0, "wall": 2.0, "start": 21.0, "worker": "gw1"},
        },
    )
    doc = json.loads(out.read_text())
    assert sorted(doc["sessions"]) == ["jax", "tensorflow"]
    assert doc["total"] == {"tests": 3, "cpu": 7.0, "wall": 6.5, "span": 3.0 + 3.0}
    assert list(doc["sessions"]["jax"]["tests"]) == ["b::u", "b::t"]  # costliest first
    cpu_times.write(out, "jax", {"b::t": {"cpu": 1.0, "wall": 1.5, "start": 0.0, "worker": "gw0"}})
    # a session run again replaces its own section
    assert json.loads(out.read_text())["total"]["tests"] == 2
