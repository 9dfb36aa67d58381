"""The benchmark sweep, its files and figures, merging, failures, bad flags and the hardware advice, in the
TensorFlow session; the JAX sweep is tests/jax/test_jax_benchmark.py's.

Three TensorFlow sweeps, each read by several tests. `worker_processes` runs as users run it, `python -m
acgan.benchmark` through PARENT_PROBE, its configuration in a worker process of its own: this session's
sweep for what the process boundary does (the parent imports no framework, a worker's out-of-memory error
becomes a row, the command line recorded), with the cheapest configuration there is (it fails once its
models are built). `bench` (one device, XLA off, with a logging delay in its trainer-overhead run) and
`replicas` (two CPU replicas) test what the workers measure and what the sweep writes of it: they run
through acgan.benchmark in this process, and so do their workers' jobs (`workers_in_this_process`:
acgan.bench.worker's main where a worker process would start), as every TensorFlow worker process would
add about 6 CPU-s to import TensorFlow, 8 workers in all. The bad flags run through the command's main,
all in one child process (`bad_flag_runs`); a refused folder and the merge command's refusals are the exit
statuses of processes of their own; everything else is pure. Sizes: width 0.125, batches 8 and 16, two
steps a window (one for `replicas`, whose rows only need to exist), the least that gives every row a real
timing, FLOP count and profile, and two batches and two policies to compare.
"""

import contextlib
import csv
import dataclasses
import io
import json
import os
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import keras
import pytest

import acgan
from acgan.bench import jobs, plots, results, sweep, sweep_runs, tables, worker
from acgan.config import Config
from acgan.measure import advice
from api_runs import BENCHMARK_FIGURES, child_env, run_parent_probe
from injection.sitecustomize import injected_env

ROOT = Path(__file__).resolve().parents[2]


def run_cli(module, *args, env=None, cwd=None):
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
    environment["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), environment.get("PYTHONPATH")) if p
    )
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        env=environment,
        cwd=cwd or ROOT,
        timeout=600,
    )


# The sweep of the `bench` fixture; its trainer-overhead run reads the metrics at every step (log_every=1),
# each read slowed by LOG_DELAY_MS (as tests/injection/sitecustomize.py slows a worker process's), so the
# logging-delay test needs no sweep of its own: the delay gives the trainer's windows lower bounds, and no
# test compares the trainer's speed with anything else (its other checks are of structure: windows, medians,
# the ratio's definition).
LOG_DELAY_MS = 400.0


@contextlib.contextmanager
def workers_in_this_process(log_delay=None):
    """Runs each job the sweep hands a worker process (`python -m acgan.bench.worker JOB RESULT`, started by
    sweep_runs.run_worker) through acgan.bench.worker's main in this process instead, its output into the
    worker's log; run_worker's own files, logs and results are untouched. With `log_delay`, every metrics
    read of the training loop sleeps that many seconds first. The dtype policy goes back to float32 after."""
    from acgan.training import tensorboard

    def run(command, stdout, stderr, env, timeout):
        assert command[:3] == [sys.executable, "-m", "acgan.bench.worker"], command
        assert env["KERAS_BACKEND"] == keras.backend.backend() and stderr == subprocess.STDOUT
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stdout):
            worker.worker_main(command[2:])
        return subprocess.CompletedProcess(command, 0)

    honest = tensorboard.SummaryWriter.scalars

    def slow_scalars(self, values, step):
        time.sleep(log_delay)
        honest(self, values, step)

    in_process = types.SimpleNamespace(
        run=run, STDOUT=subprocess.STDOUT, TimeoutExpired=subprocess.TimeoutExpired
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sweep_runs, "subprocess", in_process)
        if log_delay:
            patch.setattr(tensorboard.SummaryWriter, "scalars", slow_scalars)
        try:
            yield
        finally:
            keras.mixed_precision.set_global_policy("float32")


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """2 policies x 2 batches on 20 doodles, plus the trainer-overhead run at batch 8 (its metrics reads slowed
    by LOG_DELAY_MS) and its G-EMA run: (output folder, benchmark.json, the Report acgan.benchmark returned)."""
    tmp = tmp_path_factory.mktemp("bench")
    out = tmp / "out"
    with workers_in_this_process(log_delay=LOG_DELAY_MS / 1e3):
        report = acgan.benchmark(
            policies=("float32", "mixed_bfloat16"),
            batches=(8, 16),
            width=0.125,
            steps=2,
            warmup=1,
            repeats=2,
            jit="off",
            dataset="doodles",
            max_per_class=2,
            data_dir=str(tmp / "data"),
            overhead_batch=8,
            log_every=1,
            output_dir=str(out),
            profile=str(tmp / "profiles"),
            profile_length=2,
        )
    return out, json.loads((out / "benchmark.json").read_text()), report


@pytest.mark.slow
def test_rows_give_flops_tflops_and_a_profile(bench):
    out, doc, _ = bench
    with open(out / "benchmark.csv", newline="") as f:
        table = list(csv.DictReader(f))
    md = (out / "benchmark.md").read_text()
    assert "## FLOPs and share of peak" in md and "## Where the device time goes" in md
    for line, r in zip(table, doc["results"]):
        # TensorFlow without XLA: counted from the layers, the same count at every policy of one batch.
        assert r["flops_counted_by"] == "layers" and r["flops_per_batch"] > 0
        assert r["jax_conv_transpose"] is None and r["jax_batch_norm"] is None  # TensorFlow's rows
        assert r["tflops"] == pytest.approx(
            r["flops_per_batch"] / (r["time_per_batch_ms"] / 1e3) / 1e12
        )
        # a CPU: no peak in the table
        assert r["peak_tflops"] is None and r["share_of_peak"] is None
        assert (
            float(line["flops_per_batch"]) == r["flops_per_batch"]
            and float(line["tflops"]) == r["tflops"]
        )
        profile_dir = Path(r["profile"]["dir"])
        assert (profile_dir / "profile.md").is_file() and r["profile"]["device_ms_per_step"] > 0
        assert r["profile"]["steps"] == 2  # --profile_length
        assert sum(r["profile"]["groups"].values()) == pytest.approx(
            r["profile"]["device_ms_per_step"]
        )
        assert f"`{profile_dir.name}`" in md
    flops = {(r["policy"], r["batch"]): r["flops_per_batch"] for r in doc["results"]}
    assert flops[("float32", 16)] == 2 * flops[("float32", 8)] == 2 * flops[("mixed_bfloat16", 8)]


def test_sweep_writes_every_file(bench):
    out, doc, report = bench
    for name in ("benchmark.json", "benchmark.csv", "benchmark.md") + BENCHMARK_FIGURES:
        assert (out / name).stat().st_size > 0, name
    for name in BENCHMARK_FIGURES:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The Python call's Report: the folder and benchmark.json (the command's: `worker_processes`).
    assert report.folder == out and report.report == doc
    # One log per worker: the probe, each configuration, and the overhead section's trainer and G-EMA runs.
    assert {p.name for p in (out / "logs").iterdir()} == {
        "probe-tensorflow.log",
        *(
            f"tensorflow-{p}-b{b}-xla_off.log"
            for p in ("float32", "mixed_bfloat16")
            for b in (8, 16)
        ),
        "overhead-trainer-tensorflow-float32-b8-xla_off.log",
        "overhead-ema-tensorflow-float32-b8-xla_off.log",
    }


def test_results_record_machine_command_and_measurements(bench):
    out, doc, _ = bench
    (run,) = doc["runs"]
    # The Python call, as it was made (the command line's: `worker_processes`).
    assert run["command"].startswith("acgan.benchmark(policies=('float32', 'mixed_bfloat16'), ")
    assert run["machine"]["cpu_cores"] >= 1 and run["device"] == run["machine"]["name"]
    assert {"kind", "compute_capability", "tensorflow", "keras", "cpu_model", "cpu_flags"} <= set(
        run["machine"]
    )
    assert (
        run["backend"] == run["machine"]["backend"] == "tensorflow"
        and run["matmul_precision"] is None
    )
    md = (out / "benchmark.md").read_text()
    assert (
        f"TensorFlow {run['machine']['tensorflow']}" in md
        and f"### {run['device']}, TensorFlow, XLA off" in md
    )
    price = run["price"]
    if price["usd_per_hour"] is None:  # e.g. any CPU
        assert price["message"].startswith("no price known for") and price["message"].endswith(
            "pass --price_per_hour"
        )
    assert set(run["advice"]) == {"float32", "mixed_bfloat16"} and run["advice"]["float32"] == []
    assert {(r["policy"], r["batch"], r["jit"]) for r in doc["results"]} == {
        (p, b, False) for p in ("float32", "mixed_bfloat16") for b in (8, 16)
    }
    for r in doc["results"]:
        assert r["status"] == "ok", r["reason"]
        assert r["machine"] == run["machine"] and r["command"] == run["command"]
        # XLA off as run; TensorFlow has no matmul precision, and its runtime is in the memory it counts.
        assert r["backend"] == "tensorflow" and r["xla"] == "off" and r["replicas"] == 1
        assert (
            r["matmul_precision"] is None and "TensorFlow runtime included" in r["memory_counter"]
        )
        assert len(r["repeat_ms"]) == 2
        assert r["time_per_batch_min_ms"] <= r["time_per_batch_ms"] <= r["time_per_batch_max_ms"]
        assert r["time_per_1000_samples_ms"] == pytest.approx(
            r["time_per_batch_ms"] * 1000 / r["batch"]
        )
        assert r["samples_per_second"] == pytest.approx(
            r["batch"] / (r["time_per_batch_ms"] / 1000)
        )
        assert r["compile_seconds"] > 0 and r["peak_memory_bytes"] > 0
        assert r["skipped_steps"] == {"d": 0, "g": 0, "q": 0}
        assert r["steps_run"] == 1 + 1 + 2 * 2
        assert (r["cost_per_million_batches"] is None) == (price["usd_per_hour"] is None)


def test_speedup_is_float32_over_mixed(bench):
    out, doc, _ = bench
    md = (out / "benchmark.md").read_text()
    for batch in (8, 16):
        fp32, bf16 = (
            next(r for r in doc["results"] if r["policy"] == p and r["batch"] == batch)
            for p in ("float32", "mixed_bfloat16")
        )
        speedup = fp32["time_per_batch_ms"] / bf16["time_per_batch_ms"]
        assert bf16["speedup_vs_float32"] == pytest.approx(speedup)
        assert fp32["speedup_vs_float32"] is None
        assert f"| {batch} | {speedup:.2f}× |" in md
    assert "## Speed-up over float32" in md
    assert doc["runs"][0]["price"]["description"] in md


def test_csv_equals_json(bench):
    out, doc, _ = bench
    with open(out / "benchmark.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(doc["results"])
    for line, r in zip(table, doc["results"]):
        assert (line["device"], line["policy"], int(line["batch"]), line["status"]) == (
            r["device"],
            r["policy"],
            r["batch"],
            r["status"],
        )
        assert line["backend"] == r["backend"] == "tensorflow"
        for field in (
            "time_per_batch_ms",
            "time_per_batch_min_ms",
            "time_per_batch_max_ms",
            "time_per_1000_samples_ms",
            "samples_per_second",
            "compile_seconds",
        ):
            assert float(line[field]) == r[field], field
        assert int(line["peak_memory_bytes"]) == r["peak_memory_bytes"]
        assert line["cpu_flags"].split() == r["machine"]["cpu_flags"]
        assert line["command"] == r["command"]


def test_trainer_overhead_is_reported(bench):
    out, doc, _ = bench
    run = doc["runs"][0]
    overhead = run["overhead"]
    assert overhead["status"] == "ok", overhead["reason"]
    assert (overhead["backend"], overhead["policy"], overhead["batch"], overhead["jit"]) == (
        "tensorflow",
        "float32",
        8,
        False,
    )
    bare = next(r for r in doc["results"] if (r["policy"], r["batch"]) == ("float32", 8))
    assert overhead["bare_time_per_batch_ms"] == bare["time_per_batch_ms"]
    assert overhead["ratio"] == pytest.approx(
        overhead["trainer_time_per_batch_ms"] / bare["time_per_batch_ms"]
    )
    # Median against median: as many windows (--repeats) of as many steps (--steps) as the bare step's; with
    # --log_every 1 a window is still --steps long (a multiple of log_every), the metrics read at every step.
    assert len(overhead["trainer_window_ms"]) == 2 and overhead["trainer_measured_steps"] == 4
    assert (overhead["trainer_log_every"], overhead["trainer_window_steps"]) == (1, 2)
    assert overhead["trainer_time_per_batch_ms"] == pytest.approx(
        statistics.median(overhead["trainer_window_ms"])
    )
    # One backend: the trainer's run folder has no backend suffix, and its report names the backend.
    report = json.loads((out / sweep_runs.OVERHEAD_DIR / "report.json").read_text())
    assert report["config"]["backend"] == "tensorflow"
    md = (out / "benchmark.md").read_text()
    assert "## Trainer overhead" in md
    assert f"| {run['device']} | {tables.backend_label(run)} | float32 | 8 | off |" in md
    # G-EMA's cost: the reference preset keeps no average, so one more bare step is timed with one.
    ema = overhead["ema"]
    assert (
        ema["status"] == "ok"
        and ema["decay"] == sweep_runs.EMA_PROBE_DECAY
        and bare["ema_decay"] == 0
    )
    assert ema["without_ms"] == bare["time_per_batch_ms"] and ema["with_ms"] > 0
    assert ema["ratio"] == pytest.approx(ema["with_ms"] / ema["without_ms"])
    assert f"G-EMA on {doc['runs'][0]['device']}" in md


def test_overhead_ratio_rises_by_a_known_logging_delay(bench):
    """A sleep injected into every metrics read (--log_every 1; the `bench` sweep's LOG_DELAY_MS) shows up in
    the trainer's column: a sleep never ends early, so the loop's windows have lower bounds by construction,
    however busy the machine (not speed thresholds). The loop reads each step's metrics a step late, after
    enqueueing the next (acgan.training.loop.Session), and the bare-step window before the timed steps ends
    on a read: so the first timed step holds no read, every later one holds its predecessor's, and the last
    also the read before the run's checkpoint at its final step (trainer_job). Hence every window but the
    first takes at least the delay per step, the first at least (w - 1) / w of it, and the two windows'
    median (their mean) at least the delay. The ratio stays the two medians' quotient."""
    _, doc, _ = bench
    s = doc["runs"][0]["overhead"]
    assert s["trainer_log_every"] == 1
    first, *later = s["trainer_window_ms"]
    assert len(later) == 1, s
    w = s["trainer_window_steps"]
    assert first >= LOG_DELAY_MS * (w - 1) / w and min(later) >= LOG_DELAY_MS, s
    assert s["trainer_time_per_batch_ms"] >= LOG_DELAY_MS
    assert s["ratio"] == pytest.approx(s["trainer_time_per_batch_ms"] / s["bare_time_per_batch_ms"])


def test_report_merges_devices(bench, tmp_path):
    out, doc, _ = bench
    here = doc["runs"][0]["device"]
    other = json.loads(json.dumps(doc))
    for item in other["runs"] + other["results"]:
        item["device"] = "Tesla T4"
    (tmp_path / "t4.json").write_text(json.dumps(other))
    merged_dir = tmp_path / "merged"
    proc = run_cli(
        "acgan.benchmark_merge",
        str(out / "benchmark.json"),
        str(tmp_path / "t4.json"),
        "--output_dir",
        str(merged_dir),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    merged = json.loads((merged_dir / "benchmark.json").read_text())
    assert [run["device"] for run in merged["runs"]] == [here, "Tesla T4"]
    assert set(plots.series(merged["results"])) == {
        (d, "TensorFlow", p, False)
        for d in (here, "Tesla T4")
        for p in ("float32", "mixed_bfloat16")
    }
    for name in ("benchmark.csv", "benchmark.md") + BENCHMARK_FIGURES:
        assert (merged_dir / name).exists(), name
    md = (merged_dir / "benchmark.md").read_text()
    assert f"### {here}, TensorFlow, XLA off" in md and "### Tesla T4, TensorFlow, XLA off" in md
    with open(merged_dir / "benchmark.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 8


def test_merging_one_device_twice_keeps_them_apart(bench):
    _, doc, _ = bench
    merged = results.merge([doc, doc], sources=["a.json", "b.json"])
    here = doc["runs"][0]["device"]
    assert [run["device"] for run in merged["runs"]] == [here, f"{here} (2)"]
    assert len(plots.series(merged["results"])) == 4


def test_figures_draw_one_series_per_device_and_policy(bench, tmp_path):
    _, doc, _ = bench
    other = json.loads(json.dumps(doc))
    for item in other["runs"] + other["results"]:
        item["device"] = "Tesla T4"
    other["runs"][0]["price"] = {
        "usd_per_hour": 0.54,
        "accelerator": "T4",
        "provider": "gcp",
        "kind": "vm",
        "source": "gcp-vm-sum",
        "message": None,
    }
    for r in other["results"]:
        r["cost_per_million_batches"] = r["time_per_batch_ms"] / 1e3 * 1e6 / 3600 * 0.54
    doc = json.loads(json.dumps(doc))
    for item in doc["runs"] + doc["results"]:
        item["device"] = "here"
    doc["runs"][0]["price"] = {
        "usd_per_hour": None,
        "message": "no price known for CPU 'here'; pass --price_per_hour",
    }
    for r in doc["results"]:
        r["cost_per_million_batches"] = None
    merged = results.merge([doc, other])
    labels = plots.plot_lines(
        merged, tmp_path / "t.png", "time_per_batch_ms", "ms", "Time per batch"
    )
    assert sorted(labels) == sorted(
        f"{d}, {p}" for d in ("here", "Tesla T4") for p in ("float32", "mixed_bfloat16")
    )
    # Only the priced device has cost bars.
    assert sorted(plots.plot_cost(merged, tmp_path / "c.png")) == [
        "Tesla T4, float32",
        "Tesla T4, mixed_bfloat16",
    ]


def test_a_configuration_past_max_seconds_is_stopped_and_reported_too_slow(tmp_path):
    """--max_seconds: a worker still running then is killed; its row says too_slow, in one line."""
    job = jobs.step_job(
        sweep.SweepSettings(), "tensorflow", "mixed_float16", 8, False, tmp_path / "in.npz", 10
    )
    # Half a second: the worker cannot even load Keras by then.
    result = sweep_runs.run_worker(job, tmp_path, tmp_path / "logs" / "slow.log", max_seconds=0.5)
    assert result["status"] == "too_slow" and result["reason"] == (
        "stopped after 0.5 s (--max_seconds), its timing unfinished"
    )
    assert not (tmp_path / "bare-tensorflow-mixed_float16-b8-xla_off.result.json").exists()
    run = {
        "device": {"kind": "CPU", "name": "x"},
        "machine": {"backend": "tensorflow"},
        "command": "c",
        "price": {"usd_per_hour": None, "accelerator": None, "source": "none"},
    }
    row = results.make_row(run, "mixed_float16", 8, False, result)
    assert row["status"] == "too_slow" and row["time_per_batch_ms"] is None


BAD_FLAGS = [
    (["--max_seconds", "0"], "--max_seconds must be a positive number, got 0.0"),
    (["--profile_length", "0"], "--profile_length must be a positive integer"),
    (["--policies", "float64"], "unknown policy 'float64'"),
    (["--batches", "0"], "--batches must be positive integers, got '0'"),
    (["--batches", "64,lots"], "--batches must be positive integers, got 'lots'"),
    (["--jit", "maybe"], "--jit takes on, off or on,off, got 'maybe'"),
    (["--steps", "0"], "--steps must be a positive integer"),
    (["--warmup", "-1"], "--warmup must be a non-negative integer"),
    (["--dataset", "mnist"], "unknown dataset 'mnist'"),
    (["--batches"], "error:"),
    (
        ["--devices", "cpu:0,cpu:1", "--batches", "64,15"],
        "batch 15 does not divide by the 2 replicas",
    ),
    (["--strategy", "multi_worker"], "--strategy"),
    (["--backends", "torch"], "unknown backend 'torch': choose one of tensorflow, jax"),
    (["--backends", ""], "--backends is empty"),
    (["--backends", "jax", "--strategy", "tpu"], "--strategy tpu needs --backends tensorflow"),
    (
        ["--backends", "jax", "--devices", "cpu:0,cpu:1", "--batches", "15"],
        "batch 15 does not divide by the 2 replicas",
    ),
]

# Runs each BAD_FLAGS case (a JSON list of argument lists) through the command's main as `python -m
# acgan.benchmark` does (cli.run_main), the flags reset between cases; prints [exit status, stderr] a case.
BAD_FLAGS_CHILD = """
import contextlib, importlib, io, json, sys
from absl import flags
from acgan import cli
command = importlib.import_module("acgan.benchmark")  # the module (acgan.benchmark is also the API's call)
results = []
for args in json.loads(sys.argv[1]):
    sys.argv, stderr, status = [command.__file__, *args], io.StringIO(), None
    with contextlib.redirect_stderr(stderr):
        try:
            cli.run_main(command.main)
        except SystemExit as e:
            status = e.code
    flags.FLAGS.unparse_flags()
    results.append([status, stderr.getvalue()])
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def bad_flag_runs():
    """[(exit status, stderr)] of every BAD_FLAGS case, all in one child process: a process a case would
    cost ~0.3 CPU-s each (Python and acgan start; the command imports no framework) to run the same lines
    of cli.run_main. test_existing_benchmark_folder_is_refused checks a process's own exit status."""
    proc = subprocess.run(
        [sys.executable, "-c", BAD_FLAGS_CHILD, json.dumps([args for args, _ in BAD_FLAGS])],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("args, message", BAD_FLAGS)
def test_bad_flags_are_one_line_and_exit_2(bad_flag_runs, args, message):
    status, stderr = bad_flag_runs[BAD_FLAGS.index((args, message))]
    assert status == 2
    assert message in stderr
    assert stderr.startswith("error:") and stderr.count("\n") == 1, stderr


def test_existing_benchmark_folder_is_refused(tmp_path):
    (tmp_path / "benchmark.json").write_text("{}")
    proc = run_cli("acgan.benchmark", "--synthetic", "--output_dir", str(tmp_path))
    assert proc.returncode == 2 and "already holds a benchmark" in proc.stderr


def test_report_rejects_missing_and_foreign_files(tmp_path):
    proc = run_cli(
        "acgan.benchmark_merge", str(tmp_path / "nope.json"), "--output_dir", str(tmp_path / "r")
    )
    assert (
        proc.returncode == 2
        and proc.stderr == f"error: benchmark file {tmp_path / 'nope.json'} does not exist\n"
    )
    (tmp_path / "bad.json").write_text("{not json")
    proc = run_cli("acgan.benchmark_merge", str(tmp_path / "bad.json"))
    assert proc.returncode == 2 and "is not a valid benchmark.json" in proc.stderr
    (tmp_path / "other.json").write_text('{"results": []}')
    proc = run_cli("acgan.benchmark_merge", str(tmp_path / "other.json"))
    assert proc.returncode == 2 and "not a benchmark.json written by" in proc.stderr
    proc = run_cli("acgan.benchmark_merge")
    assert proc.returncode == 2 and "give one or more benchmark.json files" in proc.stderr
    assert not (tmp_path / "r").exists()


# The `worker_processes` sweep, as users run it (through PARENT_PROBE): its one configuration, float32 at batch
# 16 on synthetic inputs, fails with an out-of-memory error injected (tests/injection/sitecustomize.py) once
# its worker process has built its models: the cheapest TensorFlow worker there is (no step traced).
PROCESS_INJECT = "oom:16"


@pytest.fixture(scope="module")
def worker_processes(tmp_path_factory):
    """(output folder, benchmark.json, {batch: row}, the parent's CompletedProcess)."""
    out = tmp_path_factory.mktemp("worker-processes") / "out"
    proc = run_parent_probe(
        "--synthetic",
        "--policies",
        "float32",
        "--batches",
        "16",
        "--width",
        "0.125",
        "--steps",
        "1",
        "--repeats",
        "1",
        "--warmup",
        "0",
        "--jit",
        "off",
        "--no-overhead",
        "--output_dir",
        str(out),
        env=injected_env(faults=PROCESS_INJECT),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((out / "benchmark.json").read_text())
    return out, doc, {r["batch"]: r for r in doc["results"]}, proc


@pytest.mark.slow
def test_the_sweeps_own_process_imports_no_framework(worker_processes):
    """The parent only starts workers (a probe per backend describes the machine), so it holds no accelerator
    memory and one sweep can time both backends; the JAX sweep checks the same on JAX."""
    *_, proc = worker_processes
    assert "parent imported: []" in proc.stdout


@pytest.mark.slow
def test_the_command_records_its_command_line_and_prints_its_folder(worker_processes):
    out, doc, _, proc = worker_processes
    assert doc["runs"][0]["command"].startswith(
        "python -m acgan.benchmark --synthetic --policies float32 --batches 16 --width 0.125"
    )
    assert all(r["command"] == doc["runs"][0]["command"] for r in doc["results"])
    assert f"benchmark folder: {out}" in proc.stdout


@pytest.mark.slow
def test_failing_configurations_are_recorded_and_the_sweep_goes_on(worker_processes):
    """TensorFlow's own out-of-memory error (ResourceExhaustedError), raised in a worker process, becomes an
    "oom" row in one line, and the sweep goes on to write its tables and figures; a worker killed by SIGKILL,
    and JAX's out-of-memory error, are the JAX sweep's (tests/jax/test_jax_benchmark.py), where a worker
    also starts after another was killed."""
    out, _, rows, _ = worker_processes
    assert set(rows) == {16}
    assert rows[16]["status"] == "oom" and rows[16]["reason"].startswith(
        "ResourceExhaustedError: injected"
    )
    assert "\n" not in rows[16]["reason"]
    assert rows[16]["time_per_1000_samples_ms"] is None
    md = (out / "benchmark.md").read_text()
    assert "**oom**: ResourceExhaustedError: injected" in md
    for name in BENCHMARK_FIGURES:
        assert (out / name).exists()


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    """float32 on two CPU replicas at batch 8 on synthetic inputs, through acgan.benchmark in this process
    with its worker's job too (workers_in_this_process; this process has two logical CPUs, conftest.py): a
    step traced for two replicas costs ~12 CPU-s, which a worker process would add ~6 to.
    (output folder, benchmark.json, {batch: row})."""
    out = tmp_path_factory.mktemp("replicas") / "out"
    with workers_in_this_process():
        acgan.benchmark(
            synthetic=True,
            policies=("float32",),
            batches=(8,),
            width=0.125,
            steps=1,
            repeats=1,
            warmup=0,
            jit="off",
            overhead=False,
            devices=("cpu:0", "cpu:1"),
            output_dir=str(out),
        )
    doc = json.loads((out / "benchmark.json").read_text())
    return out, doc, {r["batch"]: r for r in doc["results"]}


def test_sweep_on_two_cpu_replicas_reports_global_and_per_replica_figures(replicas):
    out, doc, rows = replicas
    assert set(rows) == {8}
    row = rows[8]
    assert row["status"] == "ok", row["reason"]
    assert (
        row["replicas"] == 2
        and row["device"].endswith(" x2")
        and doc["runs"][0]["strategy"] == "auto"
    )
    assert row["samples_per_second_per_replica"] == pytest.approx(row["samples_per_second"] / 2)
    assert "2 replicas: batch and samples/s are global" in (out / "benchmark.md").read_text()


def test_a_table_price_is_paid_once_per_replica():
    run = {
        "device": "Tesla T4 x4",
        "machine": {"kind": "GPU", "name": "Tesla T4"},
        "command": "x",
        "replicas": 4,
        "price": {"usd_per_hour": 0.35, "accelerator": "T4", "source": "gcp-catalog"},
    }
    result = {"status": "ok", "time_per_batch_ms": 700.0, "replicas": 4}
    row = results.make_row(run, "float32", 2048, True, result)
    assert row["price_per_hour"] == pytest.approx(1.4)
    assert f"{row['cost_per_million_batches']:.2f}" == "272.22"
    given = dict(
        run, price={"usd_per_hour": 3.0, "accelerator": None, "source": "--price_per_hour"}
    )
    # the whole machine
    assert results.make_row(given, "float32", 2048, True, result)["price_per_hour"] == 3.0


def test_cost_row_and_markdown():
    run = {
        "device": "Tesla T4",
        "machine": {"kind": "GPU", "name": "Tesla T4"},
        "command": "x",
        "price": {"usd_per_hour": 0.35, "accelerator": "T4", "source": "gcp-catalog"},
    }
    row = results.make_row(
        run,
        "float32",
        2048,
        True,
        {
            "status": "ok",
            "time_per_batch_ms": 700.0,
            "time_per_batch_min_ms": 690.0,
            "time_per_batch_max_ms": 710.0,
        },
    )
    assert f"{row['cost_per_million_batches']:.2f}" == "68.06"
    assert row["time_per_1000_samples_ms"] == pytest.approx(700.0 * 1000 / 2048)
    assert row["samples_per_second"] == pytest.approx(2048 / 0.7)


def test_parse_flags_helpers():
    assert sweep.parse_batches(["64", "256", "64"]) == (64, 256)
    assert sweep.parse_jit(["on", "OFF", "on"]) == (True, False)


def test_synthetic_inputs_take_the_presets_shape():
    for arch, shape in (
        ("auto", (28, 28, 1)),
        ("reference", (28, 28, 1)),
        ("acgan_cifar", (32, 32, 3)),
    ):
        images, labels, names = sweep.load_inputs(
            sweep.SweepSettings(synthetic=True, base=Config(arch=arch)), 12
        )
        assert images.shape == (12,) + shape and images.dtype.name == "uint8", arch
        assert labels.shape == (12,) and set(labels) <= set(range(10)) and len(names) == 10


def test_each_worker_job_survives_its_json_and_an_unknown_key_is_refused(tmp_path):
    """The worker reads back the very job the parent built (tuples, the trainer's Config and all); a key no
    field holds, a missing field or another mode's job is an error naming it, never a silent default."""
    settings = sweep.SweepSettings(
        base=Config(devices=("cpu:0", "cpu:1"), strategy="mirrored"), profile=str(tmp_path / "p")
    )
    step = jobs.step_job(settings, "jax", "float32", 8, True, tmp_path / "in.npz", 10)
    built = [
        jobs.probe_job(settings, "jax", (28, 28, 1), 10),
        dataclasses.replace(step, config=dataclasses.replace(step.config, ema_decay=0.999)),
        jobs.trainer_job(
            settings, "jax", "float32", 8, True, tmp_path / "in.npz", tmp_path / "out", 1.5, "c"
        ),
    ]
    for job in built:
        text = job.to_json()
        assert json.loads(text)["mode"] == job.mode
        assert jobs.Job.from_json(text) == job and type(job).from_json(text) == job
    assert [job.name for job in built] == [
        "probe-jax",
        "bare-jax-float32-b8-xla_on",
        "trainer-jax-float32-b8-xla_on",
    ]
    assert step.config.devices == ("cpu:0", "cpu:1") and step.backend == "jax"
    assert step.profile_dir.endswith("jax-float32-b8-xla_on")
    assert built[2].config.devices == ("cpu:0", "cpu:1") and built[2].backend == "jax"
    with pytest.raises(ValueError, match="a bare job has no field gan, mode_name"):
        jobs.Job.from_json(json.dumps(dict(json.loads(step.to_json()), gan=1, mode_name="x")))
    with pytest.raises(ValueError, match="a bare job lacks steps"):
        jobs.Job.from_json(
            json.dumps({k: v for k, v in json.loads(step.to_json()).items() if k != "steps"})
        )
    with pytest.raises(ValueError, match="job mode 'probe', expected bare"):
        jobs.StepJob.from_json(built[0].to_json())


# --- hardware advice (pure) -------------------------------------------------------------------------

T4 = {"kind": "GPU", "name": "Tesla T4", "compute_capability": "7.5"}
P100 = {"kind": "GPU", "name": "Tesla P100", "compute_capability": "6.0"}
CPU_AVX2 = {"kind": "CPU", "name": "Xeon", "cpu_model": "Xeon", "cpu_flags": ["avx2"]}
CPU_BF16 = {
    "kind": "CPU",
    "name": "EPYC",
    "cpu_model": "EPYC",
    "cpu_flags": ["avx2", "avx512_bf16"],
}


def test_advice_says_when_mixed_is_expected_to_be_slower():
    assert advice.hardware_advice("float32", P100, {"x": 3}, 3) == []
    assert advice.hardware_advice("mixed_float16", T4, {"a": 64}, 64) == []
    (line,) = advice.hardware_advice("mixed_float16", P100, {}, 64)
    assert "slower than float32" in line and "6" in line and "XLA" in line
    (line,) = advice.hardware_advice("mixed_float16", CPU_BF16, {}, 64)
    assert "slower than float32" in line and "XLA" in line
    (line,) = advice.hardware_advice("mixed_bfloat16", CPU_AVX2, {}, 64)
    assert "slower than float32" in line and "AMX" in line and "XLA" in line
    assert not any(
        "slower" in l for l in advice.hardware_advice("mixed_bfloat16", CPU_BF16, {}, 64)
    )


def test_advice_warns_that_bfloat16_without_xla_on_a_cpu_without_bf16_adds_up_in_bfloat16():
    """TensorFlow's own (Eigen) bfloat16 convolutions add up in bfloat16 on such a CPU; XLA, JAX and oneDNN
    on avx512_bf16/AMX add up in float32 (docs/development.md, Framework facts)."""

    def sums_lines(policy, machine, xla):
        return [
            l
            for l in advice.hardware_advice(policy, machine, {}, 64, xla=xla)
            if "add up in bfloat16" in l
        ]

    (line,) = sums_lines("mixed_bfloat16", CPU_AVX2, xla=False)
    assert "keep XLA on or train in float32" in line and "Xeon" in line
    assert sums_lines("mixed_bfloat16", CPU_AVX2, xla=True) == []
    assert sums_lines("mixed_bfloat16", CPU_BF16, xla=False) == []
    assert sums_lines("mixed_float16", CPU_AVX2, xla=False) == []
    assert sums_lines("mixed_bfloat16", dict(CPU_AVX2, backend="jax"), xla=False) == []


def test_advice_lists_sizes_that_are_not_multiples_of_8():
    lines = advice.hardware_advice(
        "mixed_float16", T4, {"g_fc1": 1024, "g_deconv2": 3, "q_fc1": 100}, 100
    )
    assert any("g_deconv2=3" in l and "q_fc1=100" in l and "g_fc1" not in l for l in lines)
    assert any("batch 100 is not a multiple of 8" in l for l in lines)


def test_layer_widths_of_built_models(set_policy):
    from acgan.model.networks import build_models

    set_policy("mixed_float16")
    models = list(build_models((28, 28, 1), 10, width=0.25))
    widths = advice.layer_widths(models)
    # Computing in float16: all but the float32 logits, and G's image layer (its width is the image's channels).
    assert widths == {
        "g_fc1": 256,
        "g_fc2": 7 * 7 * 32,
        "g_deconv1": 16,
        "d_conv1": 16,
        "d_conv2": 32,
        "d_fc3": 256,
        "q_fc1": 32,
    }
    everything = advice.layer_widths(models, low_precision_only=False)
    assert everything["d_logit"] == 1 and everything["q_logits"] == 10


# --- the backend dimension (pure: the sweeps over each backend are this file's and tests/jax/'s) ---------------


def _fake_run(device, backend, precision=None):
    machine = {"kind": "GPU", "name": device, "backend": backend, "jax_matmul_precision": precision}
    return {
        "device": device,
        "backend": backend,
        "matmul_precision": precision,
        "machine": machine,
        "command": "x",
        "price": {"usd_per_hour": None, "accelerator": None, "source": None},
    }


def _fake_doc(run, policies, batches):
    rows = [
        results.make_row(
            run,
            p,
            b,
            True,
            {
                "status": "ok",
                "time_per_batch_ms": 10.0 + b / 256,
                "time_per_batch_min_ms": 9.0,
                "time_per_batch_max_ms": 12.0,
            },
        )
        for p in policies
        for b in batches
    ]
    settings = {"synthetic": True, "width": 1.0, "repeats": 3, "steps": 100, "warmup": 5}
    run = dict(
        run,
        settings=settings,
        inputs={"image_shape": [28, 28, 1], "num_classes": 10},
        overhead=None,
    )
    run["price"] = dict(run["price"], description="no price known")
    return {"format": results.FORMAT, "runs": [run], "results": rows}


def test_overhead_runs_get_one_trainer_folder_per_backend_when_a_sweep_has_several(
    tmp_path, monkeypatch
):
    """Each sweep here times one backend, so its trainer run writes to overhead-trainer; a sweep over both gives
    each backend's its own folder (overhead-trainer-jax, ...). measure_overhead with its workers replaced by
    canned results (no process starts): the trainer job's folder, the logs' names, and the figures it keeps."""
    started = []

    def fake_worker(job, work_dir, log_path, extra_env=None, max_seconds=None):
        started.append((job, log_path.name))
        if job.mode == "trainer":
            return {
                "status": "ok",
                "time_per_batch_ms": 3.0,
                "window_ms": [2.0, 4.0],
                "window_steps": 2,
                "log_every": 2,
                "measured_steps": 4,
            }
        return {"status": "ok", "time_per_batch_ms": 2.5}  # the G-EMA's bare step

    monkeypatch.setattr(sweep_runs, "run_worker", fake_worker)
    run = _fake_run("host", "jax", "default")
    rows = [
        results.make_row(
            run, "float32", 8, True, {"status": "ok", "time_per_batch_ms": 2.0, "ema_decay": 0.0}
        )
    ]
    for backends, folder in (
        (("tensorflow", "jax"), "overhead-trainer-jax"),
        (("jax",), sweep_runs.OVERHEAD_DIR),
    ):
        started.clear()
        settings = sweep.SweepSettings(
            backends=backends,
            policies=("float32",),
            batches=(8,),
            overhead_batch=8,
            steps=2,
            repeats=2,
            warmup=1,
        )
        overhead = sweep_runs.measure_overhead(
            settings,
            run,
            rows,
            tmp_path / "in.npz",
            10,
            tmp_path,
            tmp_path / "out",
            echo=lambda *_: None,
        )
        (trainer, trainer_log), (_, ema_log) = started
        assert (
            trainer.config.output_dir == str(tmp_path / "out" / folder) and trainer.backend == "jax"
        )
        assert (trainer_log, ema_log) == (
            "overhead-trainer-jax-float32-b8-xla_on.log",
            "overhead-ema-jax-float32-b8-xla_on.log",
        )
        assert (
            overhead["status"] == "ok"
            and overhead["ratio"] == 3.0 / 2.0
            and overhead["ema"]["with_ms"] == 2.5
        )


def test_one_device_timed_on_both_backends_is_compared_side_by_side():
    """What a sweep over TensorFlow and JAX writes (one sweep, or one per backend merged, as the two sessions'
    sweeps are): the same configuration on each backend in "Backends side by side" (ms on TensorFlow over ms
    on the fastest other), each backend its own group, series and CSV lines, and each run its versions. The
    rows are built by results.make_row, as the sweep's are; no worker runs."""
    tf_run, jax_run = _fake_run("host", "tensorflow"), _fake_run("host", "jax", "default")
    tf_run["machine"] = dict(tf_run["machine"], tensorflow="2.99.0", keras="3.99.0")
    jax_run["machine"] = dict(jax_run["machine"], jax="0.99.0", keras="3.99.0")
    tf_doc, jax_doc = (
        _fake_doc(tf_run, ("float32",), (16,)),
        _fake_doc(jax_run, ("float32",), (16,)),
    )
    jax_doc["results"][0]["time_per_batch_ms"] = (
        8.5  # JAX faster here; a slower JAX would name TensorFlow
    )
    doc = results.merge([tf_doc, jax_doc])
    assert [run["backend"] for run in doc["runs"]] == ["tensorflow", "jax"]
    assert [run["device"] for run in doc["runs"]] == ["host", "host"]  # two backends, not a repeat
    md = tables.render_markdown(doc)
    assert (
        "### host, TensorFlow, XLA on" in md
        and "### host, JAX, matmul precision default, XLA on" in md
    )
    assert "JAX 0.99.0 (matmul precision default)" in md and "TensorFlow 2.99.0" in md
    tf_ms, jax_ms = (
        next(r["time_per_batch_ms"] for r in doc["results"] if r["backend"] == b)
        for b in ("tensorflow", "jax")
    )
    assert "## Backends side by side" in md
    assert (
        f"| host | on | float32 | 16 | {tf_ms:,.1f} | {jax_ms:,.1f} | "
        f"{'TensorFlow' if tf_ms <= jax_ms else 'JAX, matmul precision default'} | {tf_ms / jax_ms:.2f} |"
    ) in md
    assert sorted(
        line["backend"] for line in csv.DictReader(io.StringIO(tables.render_csv(doc)))
    ) == ["jax", "tensorflow"]
    assert set(plots.series(doc["results"])) == {
        ("host", "TensorFlow", "float32", True),
        ("host", "JAX, matmul precision default", "float32", True),
    }


def test_merge_joins_phases_of_one_machine_and_keeps_repeats_apart():
    """The GPU script's phases: other configurations of the same device join its tables; float32 at
    matmul precision highest is its own series, with no speed-up against the default's float32."""
    default = _fake_run("NVIDIA H200", "jax", "default")
    phases = [
        _fake_doc(default, ("float32", "mixed_bfloat16"), (256, 2048)),
        _fake_doc(_fake_run("NVIDIA H200", "jax", "highest"), ("float32",), (256, 2048)),
        _fake_doc(default, ("float32", "mixed_bfloat16"), (4096,)),
    ]
    merged = results.merge(phases)
    assert {r["device"] for r in merged["results"]} == {"NVIDIA H200"}
    assert set(results.groups(merged["results"])) == {
        ("NVIDIA H200", "JAX, matmul precision default", True),
        ("NVIDIA H200", "JAX, matmul precision highest", True),
    }
    bf16 = [r for r in merged["results"] if r["policy"] == "mixed_bfloat16"]
    assert len(bf16) == 3 and all(r["speedup_vs_float32"] == pytest.approx(1.0) for r in bf16)
    md = tables.render_markdown(merged)
    assert "| NVIDIA H200 | on | float32 | 2048 | 18.0 | 18.0 |" in md
    again = results.merge(phases[:1] + phases[:1])
    assert [run["device"] for run in again["runs"]] == ["NVIDIA H200", "NVIDIA H200 (2)"]


def test_gpu_script_refuses_an_unknown_mode_and_missing_wheels(tmp_path):
    script = ROOT / "scripts" / "gpu_benchmark.sh"
    proc = subprocess.run(
        ["bash", str(script), "fetch"], capture_output=True, text=True, timeout=60
    )
    assert (
        proc.returncode == 2
        and proc.stderr
        == "error: unknown mode 'fetch': give no argument (run the benchmark) or 'download'\n"
    )
    proc = subprocess.run(
        ["bash", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, ACGAN_GPU_WHEELS=str(tmp_path / "none"), OUT=str(tmp_path / "out")),
    )
    assert (
        proc.returncode == 2
        and proc.stderr.startswith("error: no keras wheel in ")
        and proc.stderr.count("\n") == 1
    )


def test_gpu_quality_script_refuses_an_argument_and_missing_wheels(tmp_path):
    script = ROOT / "scripts" / "gpu_quality.sh"
    proc = subprocess.run(
        ["bash", str(script), "download"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error: unknown argument 'download': ")
    proc = subprocess.run(
        ["bash", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, ACGAN_GPU_WHEELS=str(tmp_path / "none"), OUT=str(tmp_path / "out")),
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert (
        proc.stderr.startswith("error: no keras wheel in ")
        and "scripts/gpu_benchmark.sh download" in proc.stderr
    )
    assert not (tmp_path / "out").exists()
