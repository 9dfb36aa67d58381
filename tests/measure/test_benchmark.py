"""The benchmark sweep, its files and figures, merging, failures, bad flags and the hardware advice.

The CLIs run as subprocesses: each sweep configuration runs in a worker process anyway, and this
keeps TensorFlow's device setup and the dtype policy of this test process untouched.
"""
import csv
import dataclasses
import json
import statistics
import os
import subprocess
import sys
from pathlib import Path

import pytest

from acgan.bench import jobs, plots, results, sweep, sweep_runs, tables, worker
from acgan.measure import advice

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--width", "0.125", "--steps", "2", "--warmup", "1", "--repeats", "2", "--jit", "off"]
FIGURES = ("time_per_batch.png", "time_per_1000_samples.png", "cost_per_million_batches.png", "tflops.png")


def run_cli(module, *args, env=None, cwd=None):
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
    environment["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), environment.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          env=environment, cwd=cwd or ROOT, timeout=600)


# The sweep of the `bench` fixture; its trainer-overhead run reads the metrics at every step (--log_every 1),
# so the logging-delay test compares against it with one sweep of its own.
BENCH_DATA = ["--dataset", "doodles", "--max_per_class", "2"]
BENCH_OVERHEAD = ["--overhead_batch", "8", "--log_every", "1"]


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """2 policies x 2 batches on 20 doodles, plus the trainer-overhead run at batch 8."""
    tmp = tmp_path_factory.mktemp("bench")
    out = tmp / "out"
    proc = run_cli("acgan.benchmark", "--policies", "float32,mixed_bfloat16", "--batches", "8,16", *TINY,
                   *BENCH_DATA, "--data_dir", str(tmp / "data"), *BENCH_OVERHEAD, "--output_dir", str(out),
                   "--profile", str(tmp / "profiles"), "--profile_length", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, json.loads((out / "benchmark.json").read_text()), proc


def test_rows_give_flops_tflops_and_a_profile(bench):
    out, doc, _ = bench
    with open(out / "benchmark.csv", newline="") as f:
        table = list(csv.DictReader(f))
    md = (out / "benchmark.md").read_text()
    assert "## FLOPs and share of peak" in md and "## Where the device time goes" in md
    for line, r in zip(table, doc["results"]):
        # TensorFlow without XLA: counted from the layers, the same count at every policy of one batch.
        assert r["flops_counted_by"] == "layers" and r["flops_per_batch"] > 0
        assert r["tflops"] == pytest.approx(r["flops_per_batch"] / (r["time_per_batch_ms"] / 1e3) / 1e12)
        assert r["peak_tflops"] is None and r["share_of_peak"] is None   # a CPU: no peak in the table
        assert float(line["flops_per_batch"]) == r["flops_per_batch"] and float(line["tflops"]) == r["tflops"]
        profile_dir = Path(r["profile"]["dir"])
        assert (profile_dir / "profile.md").is_file() and r["profile"]["device_ms_per_step"] > 0
        assert r["profile"]["steps"] == 2  # --profile_length
        assert sum(r["profile"]["groups"].values()) == pytest.approx(r["profile"]["device_ms_per_step"])
        assert f"`{profile_dir.name}`" in md
    flops = {(r["policy"], r["batch"]): r["flops_per_batch"] for r in doc["results"]}
    assert flops[("float32", 16)] == 2 * flops[("float32", 8)] == 2 * flops[("mixed_bfloat16", 8)]


def test_sweep_writes_every_file(bench):
    out, doc, proc = bench
    for name in ("benchmark.json", "benchmark.csv", "benchmark.md") + FIGURES:
        assert (out / name).stat().st_size > 0, name
    for name in FIGURES:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "benchmark folder" in proc.stdout


def test_results_record_machine_command_and_measurements(bench):
    _, doc, _ = bench
    (run,) = doc["runs"]
    assert run["command"].startswith("python -m acgan.benchmark --policies float32,mixed_bfloat16")
    assert run["machine"]["cpu_cores"] >= 1 and run["device"] == run["machine"]["name"]
    assert {"kind", "compute_capability", "tensorflow", "keras", "cpu_model", "cpu_flags"} <= set(run["machine"])
    price = run["price"]
    if price["usd_per_hour"] is None:   # e.g. any CPU
        assert price["message"].startswith("no price known for") and price["message"].endswith("pass --price_per_hour")
    assert set(run["advice"]) == {"float32", "mixed_bfloat16"} and run["advice"]["float32"] == []
    assert {(r["policy"], r["batch"], r["jit"]) for r in doc["results"]} == {
        (p, b, False) for p in ("float32", "mixed_bfloat16") for b in (8, 16)}
    for r in doc["results"]:
        assert r["status"] == "ok", r["reason"]
        assert r["machine"] == run["machine"] and r["command"] == run["command"]
        assert len(r["repeat_ms"]) == 2
        assert r["time_per_batch_min_ms"] <= r["time_per_batch_ms"] <= r["time_per_batch_max_ms"]
        assert r["time_per_1000_samples_ms"] == pytest.approx(r["time_per_batch_ms"] * 1000 / r["batch"])
        assert r["samples_per_second"] == pytest.approx(r["batch"] / (r["time_per_batch_ms"] / 1000))
        assert r["compile_seconds"] > 0 and r["peak_memory_bytes"] > 0
        assert r["skipped_steps"] == {"d": 0, "g": 0, "q": 0}
        assert r["steps_run"] == 1 + 1 + 2 * 2
        assert (r["cost_per_million_batches"] is None) == (price["usd_per_hour"] is None)


def test_speedup_is_float32_over_mixed(bench):
    out, doc, _ = bench
    md = (out / "benchmark.md").read_text()
    for batch in (8, 16):
        fp32, bf16 = (next(r for r in doc["results"] if r["policy"] == p and r["batch"] == batch)
                      for p in ("float32", "mixed_bfloat16"))
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
            r["device"], r["policy"], r["batch"], r["status"])
        for field in ("time_per_batch_ms", "time_per_batch_min_ms", "time_per_batch_max_ms",
                      "time_per_1000_samples_ms", "samples_per_second", "compile_seconds"):
            assert float(line[field]) == r[field], field
        assert int(line["peak_memory_bytes"]) == r["peak_memory_bytes"]
        assert line["cpu_flags"].split() == r["machine"]["cpu_flags"]
        assert line["command"] == r["command"]


def test_trainer_overhead_is_reported(bench):
    out, doc, _ = bench
    overhead = doc["runs"][0]["overhead"]
    assert overhead["status"] == "ok", overhead["reason"]
    assert (overhead["policy"], overhead["batch"], overhead["jit"]) == ("float32", 8, False)
    bare = next(r for r in doc["results"] if (r["policy"], r["batch"]) == ("float32", 8))
    assert overhead["bare_time_per_batch_ms"] == bare["time_per_batch_ms"]
    assert overhead["ratio"] == pytest.approx(overhead["trainer_time_per_batch_ms"] / bare["time_per_batch_ms"])
    # Median against median: as many windows (--repeats) of as many steps (--steps) as the bare step's.
    assert len(overhead["trainer_window_ms"]) == 2 and overhead["trainer_measured_steps"] == 4
    assert overhead["trainer_time_per_batch_ms"] == pytest.approx(statistics.median(overhead["trainer_window_ms"]))
    assert (out / sweep_runs.OVERHEAD_DIR / "report.json").exists()
    assert "## Trainer overhead" in (out / "benchmark.md").read_text()
    # G-EMA's cost: the reference preset keeps no average, so one more bare step is timed with one.
    ema = overhead["ema"]
    assert ema["status"] == "ok" and ema["decay"] == sweep_runs.EMA_PROBE_DECAY and bare["ema_decay"] == 0
    assert ema["without_ms"] == bare["time_per_batch_ms"] and ema["with_ms"] > 0
    assert ema["ratio"] == pytest.approx(ema["with_ms"] / ema["without_ms"])
    assert f"G-EMA on {doc['runs'][0]['device']}" in (out / "benchmark.md").read_text()


@pytest.mark.slow
def test_overhead_ratio_rises_by_a_known_logging_delay(bench, tmp_path):
    """A sleep injected into every metrics read (--log_every 1) shows up in the trainer's column: a sleep never
    ends early, so with one read per step every window of the loop takes at least the delay per step, however
    busy the machine (a lower bound by construction, not a speed threshold)."""
    delay_ms = 400.0
    out, doc, _ = bench
    slow = run_cli("acgan.benchmark", "--policies", "float32", "--batches", "8", *TINY, *BENCH_DATA,
                   "--data_dir", str(out.parent / "data"), *BENCH_OVERHEAD, "--output_dir", str(tmp_path / "slow"),
                   env={worker.LOG_DELAY_VARIABLE: str(delay_ms / 1e3)})
    assert slow.returncode == 0, slow.stderr[-3000:]
    (s,) = json.loads((tmp_path / "slow" / "benchmark.json").read_text())["runs"]
    p, s = doc["runs"][0]["overhead"], s["overhead"]
    assert p["trainer_log_every"] == s["trainer_log_every"] == 1
    assert len(s["trainer_window_ms"]) == len(p["trainer_window_ms"]) == 2
    assert min(s["trainer_window_ms"]) >= delay_ms, (p, s)
    assert s["trainer_time_per_batch_ms"] >= delay_ms
    assert s["ratio"] == pytest.approx(s["trainer_time_per_batch_ms"] / s["bare_time_per_batch_ms"])


def test_report_merges_devices(bench, tmp_path):
    out, doc, _ = bench
    here = doc["runs"][0]["device"]
    other = json.loads(json.dumps(doc))
    for item in other["runs"] + other["results"]:
        item["device"] = "Tesla T4"
    (tmp_path / "t4.json").write_text(json.dumps(other))
    merged_dir = tmp_path / "merged"
    proc = run_cli("acgan.benchmark_merge", str(out / "benchmark.json"), str(tmp_path / "t4.json"),
                   "--output_dir", str(merged_dir))
    assert proc.returncode == 0, proc.stderr[-3000:]
    merged = json.loads((merged_dir / "benchmark.json").read_text())
    assert [run["device"] for run in merged["runs"]] == [here, "Tesla T4"]
    assert set(plots.series(merged["results"])) == {
        (d, "TensorFlow", p, False) for d in (here, "Tesla T4") for p in ("float32", "mixed_bfloat16")}
    for name in ("benchmark.csv", "benchmark.md") + FIGURES:
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
    other["runs"][0]["price"] = {"usd_per_hour": 0.54, "accelerator": "T4", "provider": "gcp", "kind": "vm",
                                 "source": "gcp-vm-sum", "message": None}
    for r in other["results"]:
        r["cost_per_million_batches"] = r["time_per_batch_ms"] / 1e3 * 1e6 / 3600 * 0.54
    doc = json.loads(json.dumps(doc))
    for item in doc["runs"] + doc["results"]:
        item["device"] = "here"
    doc["runs"][0]["price"] = {"usd_per_hour": None, "message": "no price known for CPU 'here'; pass --price_per_hour"}
    for r in doc["results"]:
        r["cost_per_million_batches"] = None
    merged = results.merge([doc, other])
    labels = plots.plot_lines(merged, tmp_path / "t.png", "time_per_batch_ms", "ms", "Time per batch")
    assert sorted(labels) == sorted(f"{d}, {p}" for d in ("here", "Tesla T4") for p in ("float32", "mixed_bfloat16"))
    # Only the priced device has cost bars.
    assert sorted(plots.plot_cost(merged, tmp_path / "c.png")) == ["Tesla T4, float32", "Tesla T4, mixed_bfloat16"]


def test_mixed_float16_with_xla_reports_loss_scales_and_skipped_steps(tmp_path):
    """The sweep above runs XLA off and no loss scaling; this row runs the loss-scaled step under XLA.

    From the initial 2^15, each skipped step halves an optimizer's scale (it grows only after 2000
    good steps), so every reported scale must be 2^15 / 2^(its skipped steps)."""
    out = tmp_path / "out"
    proc = run_cli("acgan.benchmark", "--policies", "mixed_float16", "--batches", "8", "--width", "0.125",
                   "--steps", "2", "--warmup", "1", "--repeats", "1", "--jit", "on", "--no-overhead",
                   "--dataset", "doodles", "--max_per_class", "2", "--data_dir", str(tmp_path / "data"),
                   "--output_dir", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((out / "benchmark.json").read_text())
    (row,) = doc["results"]
    assert row["status"] == "ok", row["reason"]
    assert (row["policy"], row["batch"], row["jit"], row["xla"]) == ("mixed_float16", 8, True, "step")
    assert row["steps_run"] == 1 + 1 + 1 * 2
    skipped, scales = row["skipped_steps"], row["loss_scale"]
    assert set(skipped) == set(scales) == {"d", "g", "q"}
    # 2^15 overflows the first steps of a fresh run (measured here: 2, 2 and 3 skipped; scales 8192,
    # 8192, 4096), so the skip counting is exercised, not only its zero.
    assert sum(skipped.values()) > 0, skipped
    for name in "dgq":
        assert 0 <= skipped[name] <= row["steps_run"], name
        assert scales[name] == 2.0 ** 15 / 2 ** skipped[name], (name, skipped, scales)
    with open(out / "benchmark.csv", newline="") as f:
        (line,) = csv.DictReader(f)
    assert [int(line[f"{k}_skipped"]) for k in "dgq"] == [skipped[k] for k in "dgq"]
    md = (out / "benchmark.md").read_text()
    assert "XLA on" in md and f"| {'/'.join(str(skipped[k]) for k in 'dgq')} |" in md


def test_failing_configurations_are_recorded_and_the_sweep_goes_on(tmp_path):
    out = tmp_path / "out"
    proc = run_cli("acgan.benchmark", "--synthetic", "--policies", "float32", "--batches", "4,8,12", *TINY,
                   "--steps", "1", "--repeats", "1", "--warmup", "0", "--no-overhead",
                   "--output_dir", str(out), env={worker.INJECT_VARIABLE: "oom:8,kill:12"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {r["batch"]: r for r in json.loads((out / "benchmark.json").read_text())["results"]}
    assert rows[4]["status"] == "ok"
    assert rows[8]["status"] == "oom" and rows[8]["reason"].startswith("ResourceExhaustedError: injected")
    assert rows[12]["status"] == "failed" and "SIGKILL" in rows[12]["reason"]
    assert "\n" not in rows[8]["reason"] + rows[12]["reason"]
    assert rows[8]["time_per_1000_samples_ms"] is None
    md = (out / "benchmark.md").read_text()
    assert "**oom**: ResourceExhaustedError: injected" in md and "**failed**: worker killed by SIGKILL" in md
    for name in FIGURES:
        assert (out / name).exists()


def test_a_configuration_past_max_seconds_is_stopped_and_reported_too_slow(tmp_path):
    """--max_seconds: a worker still running then is killed; its row says too_slow, in one line."""
    job = jobs.step_job(sweep.SweepSettings(), "tensorflow", "mixed_float16", 8, False, tmp_path / "in.npz", 10)
    # Half a second: the worker cannot even load Keras by then.
    result = sweep_runs.run_worker(job, tmp_path, tmp_path / "logs" / "slow.log", max_seconds=0.5)
    assert result["status"] == "too_slow" and result["reason"] == (
        "stopped after 0.5 s (--max_seconds), its timing unfinished")
    assert not (tmp_path / "bare-tensorflow-mixed_float16-b8-xla_off.result.json").exists()
    run = {"device": {"kind": "CPU", "name": "x"}, "machine": {"backend": "tensorflow"}, "command": "c",
           "price": {"usd_per_hour": None, "accelerator": None, "source": "none"}}
    row = results.make_row(run, "mixed_float16", 8, False, result)
    assert row["status"] == "too_slow" and row["time_per_batch_ms"] is None


@pytest.mark.parametrize("args, message", [
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
    (["--devices", "cpu:0,cpu:1", "--batches", "64,15"], "batch 15 does not divide by the 2 replicas"),
    (["--strategy", "multi_worker"], "--strategy"),
    (["--backends", "torch"], "unknown backend 'torch': choose one of tensorflow, jax"),
    (["--backends", ""], "--backends is empty"),
    (["--backends", "jax", "--strategy", "tpu"], "--strategy tpu needs --backends tensorflow"),
    (["--backends", "jax", "--devices", "cpu:0,cpu:1", "--batches", "15"], "batch 15 does not divide by the 2 replicas"),
])
def test_bad_flags_are_one_line_and_exit_2(args, message):
    proc = run_cli("acgan.benchmark", *args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert proc.stderr.startswith("error:") and proc.stderr.count("\n") == 1, proc.stderr


def test_existing_benchmark_folder_is_refused(tmp_path):
    (tmp_path / "benchmark.json").write_text("{}")
    proc = run_cli("acgan.benchmark", "--synthetic", "--output_dir", str(tmp_path))
    assert proc.returncode == 2 and "already holds a benchmark" in proc.stderr


def test_report_rejects_missing_and_foreign_files(tmp_path):
    proc = run_cli("acgan.benchmark_merge", str(tmp_path / "nope.json"), "--output_dir", str(tmp_path / "r"))
    assert proc.returncode == 2 and proc.stderr == f"error: benchmark file {tmp_path / 'nope.json'} does not exist\n"
    (tmp_path / "bad.json").write_text("{not json")
    proc = run_cli("acgan.benchmark_merge", str(tmp_path / "bad.json"))
    assert proc.returncode == 2 and "is not a valid benchmark.json" in proc.stderr
    (tmp_path / "other.json").write_text('{"results": []}')
    proc = run_cli("acgan.benchmark_merge", str(tmp_path / "other.json"))
    assert proc.returncode == 2 and "not a benchmark.json written by" in proc.stderr
    proc = run_cli("acgan.benchmark_merge")
    assert proc.returncode == 2 and "give one or more benchmark.json files" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_sweep_on_two_cpu_replicas_reports_global_and_per_replica_figures(tmp_path):
    out = tmp_path / "out"
    proc = run_cli("acgan.benchmark", "--synthetic", "--policies", "float32", "--batches", "8", *TINY,
                   "--steps", "1", "--repeats", "1", "--warmup", "0", "--no-overhead",
                   "--devices", "cpu:0,cpu:1", "--output_dir", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((out / "benchmark.json").read_text())
    (row,) = doc["results"]
    assert row["status"] == "ok", row["reason"]
    assert row["replicas"] == 2 and row["device"].endswith(" x2") and doc["runs"][0]["strategy"] == "auto"
    assert row["samples_per_second_per_replica"] == pytest.approx(row["samples_per_second"] / 2)
    assert "2 replicas: batch and samples/s are global" in (out / "benchmark.md").read_text()


def test_a_table_price_is_paid_once_per_replica():
    run = {"device": "Tesla T4 x4", "machine": {"kind": "GPU", "name": "Tesla T4"}, "command": "x", "replicas": 4,
           "price": {"usd_per_hour": 0.35, "accelerator": "T4", "source": "gcp-catalog"}}
    result = {"status": "ok", "time_per_batch_ms": 700.0, "replicas": 4}
    row = results.make_row(run, "float32", 2048, True, result)
    assert row["price_per_hour"] == pytest.approx(1.4)
    assert f"{row['cost_per_million_batches']:.2f}" == "272.22"
    given = dict(run, price={"usd_per_hour": 3.0, "accelerator": None, "source": "--price_per_hour"})
    assert results.make_row(given, "float32", 2048, True, result)["price_per_hour"] == 3.0  # the whole machine


def test_cost_row_and_markdown():
    run = {"device": "Tesla T4", "machine": {"kind": "GPU", "name": "Tesla T4"}, "command": "x",
           "price": {"usd_per_hour": 0.35, "accelerator": "T4", "source": "gcp-catalog"}}
    row = results.make_row(run, "float32", 2048, True, {"status": "ok", "time_per_batch_ms": 700.0,
                                                      "time_per_batch_min_ms": 690.0, "time_per_batch_max_ms": 710.0})
    assert f"{row['cost_per_million_batches']:.2f}" == "68.06"
    assert row["time_per_1000_samples_ms"] == pytest.approx(700.0 * 1000 / 2048)
    assert row["samples_per_second"] == pytest.approx(2048 / 0.7)


def test_parse_flags_helpers():
    assert sweep.parse_batches(["64", "256", "64"]) == (64, 256)
    assert sweep.parse_jit(["on", "OFF", "on"]) == (True, False)


def test_synthetic_inputs_take_the_presets_shape():
    for arch, shape in (("auto", (28, 28, 1)), ("reference", (28, 28, 1)), ("acgan_cifar", (32, 32, 3))):
        images, labels, names = sweep.load_inputs(sweep.SweepSettings(synthetic=True, arch=arch), 12)
        assert images.shape == (12,) + shape and images.dtype.name == "uint8", arch
        assert labels.shape == (12,) and set(labels) <= set(range(10)) and len(names) == 10


def test_each_worker_job_survives_its_json_and_an_unknown_key_is_refused(tmp_path):
    """The worker reads back the very job the parent built (tuples, the trainer's Config and all); a key no
    field holds, a missing field or another mode's job is an error naming it, never a silent default."""
    settings = sweep.SweepSettings(devices=("cpu:0", "cpu:1"), strategy="mirrored", profile=str(tmp_path / "p"))
    step = jobs.step_job(settings, "jax", "float32", 8, True, tmp_path / "in.npz", 10)
    built = [jobs.probe_job(settings, "jax", (28, 28, 1), 10), dataclasses.replace(step, ema_decay=0.999),
             jobs.trainer_job(settings, "jax", "float32", 8, True, tmp_path / "in.npz", tmp_path / "out", 1.5, "c")]
    for job in built:
        text = job.to_json()
        assert json.loads(text)["mode"] == job.mode
        assert jobs.Job.from_json(text) == job and type(job).from_json(text) == job
    assert [job.name for job in built] == ["probe-jax", "bare-jax-float32-b8-xla_on", "trainer-jax-float32-b8-xla_on"]
    assert step.devices == ("cpu:0", "cpu:1") and step.profile_dir.endswith("jax-float32-b8-xla_on")
    assert built[2].config.devices == ("cpu:0", "cpu:1") and built[2].backend == "jax"
    with pytest.raises(ValueError, match="a bare job has no field gan, mode_name"):
        jobs.Job.from_json(json.dumps(dict(json.loads(step.to_json()), gan=1, mode_name="x")))
    with pytest.raises(ValueError, match="a bare job lacks batch"):
        jobs.Job.from_json(json.dumps({k: v for k, v in json.loads(step.to_json()).items() if k != "batch"}))
    with pytest.raises(ValueError, match="job mode 'probe', expected bare"):
        jobs.StepJob.from_json(built[0].to_json())


# --- hardware advice (pure) -------------------------------------------------------------------------

T4 = {"kind": "GPU", "name": "Tesla T4", "compute_capability": "7.5"}
P100 = {"kind": "GPU", "name": "Tesla P100", "compute_capability": "6.0"}
CPU_AVX2 = {"kind": "CPU", "name": "Xeon", "cpu_model": "Xeon", "cpu_flags": ["avx2"]}
CPU_BF16 = {"kind": "CPU", "name": "EPYC", "cpu_model": "EPYC", "cpu_flags": ["avx2", "avx512_bf16"]}


def test_advice_says_when_mixed_is_expected_to_be_slower():
    assert advice.hardware_advice("float32", P100, {"x": 3}, 3) == []
    assert advice.hardware_advice("mixed_float16", T4, {"a": 64}, 64) == []
    (line,) = advice.hardware_advice("mixed_float16", P100, {}, 64)
    assert "slower than float32" in line and "6" in line and "XLA" in line
    (line,) = advice.hardware_advice("mixed_float16", CPU_BF16, {}, 64)
    assert "slower than float32" in line and "XLA" in line
    (line,) = advice.hardware_advice("mixed_bfloat16", CPU_AVX2, {}, 64)
    assert "slower than float32" in line and "AMX" in line and "XLA" in line
    assert not any("slower" in l for l in advice.hardware_advice("mixed_bfloat16", CPU_BF16, {}, 64))


def test_advice_warns_that_bfloat16_without_xla_on_a_cpu_without_bf16_adds_up_in_bfloat16():
    """TensorFlow's own (Eigen) bfloat16 convolutions add up in bfloat16 on such a CPU; XLA, JAX and oneDNN
    on avx512_bf16/AMX add up in float32 (docs/development.md, Framework facts)."""
    def sums_lines(policy, machine, xla):
        return [l for l in advice.hardware_advice(policy, machine, {}, 64, xla=xla) if "add up in bfloat16" in l]

    (line,) = sums_lines("mixed_bfloat16", CPU_AVX2, xla=False)
    assert "keep XLA on or train in float32" in line and "Xeon" in line
    assert sums_lines("mixed_bfloat16", CPU_AVX2, xla=True) == []
    assert sums_lines("mixed_bfloat16", CPU_BF16, xla=False) == []
    assert sums_lines("mixed_float16", CPU_AVX2, xla=False) == []
    assert sums_lines("mixed_bfloat16", dict(CPU_AVX2, backend="jax"), xla=False) == []


def test_advice_lists_sizes_that_are_not_multiples_of_8():
    lines = advice.hardware_advice("mixed_float16", T4, {"g_fc1": 1024, "g_deconv2": 3, "q_fc1": 100}, 100)
    assert any("g_deconv2=3" in l and "q_fc1=100" in l and "g_fc1" not in l for l in lines)
    assert any("batch 100 is not a multiple of 8" in l for l in lines)


def test_layer_widths_of_built_models(set_policy):
    from acgan.model.networks import build_models

    set_policy("mixed_float16")
    models = list(build_models((28, 28, 1), 10, width=0.25))
    widths = advice.layer_widths(models)
    # Computing in float16: all but the float32 logits, and G's image layer (its width is the image's channels).
    assert widths == {"g_fc1": 256, "g_fc2": 7 * 7 * 32, "g_deconv1": 16,
                      "d_conv1": 16, "d_conv2": 32, "d_fc3": 256, "q_fc1": 32}
    everything = advice.layer_widths(models, low_precision_only=False)
    assert everything["d_logit"] == 1 and everything["q_logits"] == 10


# --- the backend dimension ---------------------------------------------------------------------------

# Runs python -m acgan.benchmark in this process's place and prints, at exit, which of Keras, TensorFlow
# and JAX the sweep's own (parent) process imported: none, as the workers load their backends.
PARENT_PROBE = """
import atexit, runpy, sys
atexit.register(lambda: print("parent imported:", sorted(m for m in ("keras", "tensorflow", "jax")
                                                          if sys.modules.get(m) is not None)))
sys.argv = ["acgan.benchmark"] + sys.argv[1:]
runpy.run_module("acgan.benchmark", run_name="__main__")
"""


def run_parent_probe(*args, env=None):
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
    environment["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), environment.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-c", PARENT_PROBE, *args], capture_output=True, text=True,
                          env=environment, cwd=ROOT, timeout=600)


@pytest.fixture(scope="module")
def both_backends(tmp_path_factory):
    """One sweep over TensorFlow and JAX, float32 at batch 16 with XLA, each with its trainer-overhead run."""
    out = tmp_path_factory.mktemp("backends") / "out"
    proc = run_parent_probe("--backends", "tensorflow,jax", "--synthetic", "--policies", "float32", "--batches", "16",
                            "--steps", "2", "--warmup", "1", "--repeats", "2", "--width", "0.25",
                            "--overhead_batch", "16", "--output_dir", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def test_one_sweep_times_both_backends_side_by_side(both_backends):
    out, proc = both_backends
    assert "parent imported: []" in proc.stdout
    doc = json.loads((out / "benchmark.json").read_text())
    tf_run, jax_run = doc["runs"]
    assert (tf_run["backend"], jax_run["backend"]) == ("tensorflow", "jax")
    assert tf_run["machine"]["backend"] == "tensorflow" and "tensorflow" in tf_run["machine"]
    assert "tensorflow" not in jax_run["machine"] and jax_run["machine"]["jax"]
    assert jax_run["matmul_precision"] == jax_run["machine"]["jax_matmul_precision"] == "default"
    rows = {r["backend"]: r for r in doc["results"]}
    assert set(rows) == {"tensorflow", "jax"}
    for backend, r in rows.items():
        assert r["status"] == "ok", r["reason"]
        assert (r["policy"], r["batch"], r["jit"], r["xla"]) == ("float32", 16, True, "step")
        assert r["time_per_batch_ms"] > 0 and r["peak_memory_bytes"] > 0 and r["steps_run"] == 1 + 1 + 2 * 2
        assert r["skipped_steps"] == {"d": 0, "g": 0, "q": 0}
    assert rows["jax"]["matmul_precision"] == "default" and rows["tensorflow"]["matmul_precision"] is None
    assert "JAX runtime included" in rows["jax"]["memory_counter"]
    assert "TensorFlow runtime included" in rows["tensorflow"]["memory_counter"]
    assert {p.name for p in (out / "logs").iterdir()} == {
        "probe-tensorflow.log", "probe-jax.log", "tensorflow-float32-b16-xla_on.log", "jax-float32-b16-xla_on.log",
        "overhead-trainer-tensorflow-float32-b16-xla_on.log", "overhead-trainer-jax-float32-b16-xla_on.log",
        "overhead-ema-tensorflow-float32-b16-xla_on.log", "overhead-ema-jax-float32-b16-xla_on.log"}
    device = tf_run["device"]
    md = (out / "benchmark.md").read_text()
    assert f"### {device}, TensorFlow, XLA on" in md and f"### {device}, JAX, matmul precision default, XLA on" in md
    assert f"JAX {jax_run['machine']['jax']} (matmul precision default)" in md
    assert f"TensorFlow {tf_run['machine']['tensorflow']}" in md
    tf_ms, jax_ms = rows["tensorflow"]["time_per_batch_ms"], rows["jax"]["time_per_batch_ms"]
    assert "## Backends side by side" in md
    assert (f"| {device} | on | float32 | 16 | {tf_ms:,.1f} | {jax_ms:,.1f} | "
            f"{'TensorFlow' if tf_ms <= jax_ms else 'JAX, matmul precision default'} | {tf_ms / jax_ms:.2f} |") in md
    with open(out / "benchmark.csv", newline="") as f:
        assert sorted(line["backend"] for line in csv.DictReader(f)) == ["jax", "tensorflow"]
    assert set(plots.series(doc["results"])) == {
        (device, "TensorFlow", "float32", True), (device, "JAX, matmul precision default", "float32", True)}


def test_jax_sweep_never_imports_tensorflow_and_reports_jax_out_of_memory(tmp_path):
    """As on the GPU machine, which has no TensorFlow: `import tensorflow` fails in every process here."""
    blocker = tmp_path / "no-tensorflow" / "tensorflow"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('tensorflow is blocked in this test')\n")
    out = tmp_path / "out"
    proc = run_parent_probe("--backends", "jax", "--synthetic", "--policies", "float32", "--batches", "8,16",
                            "--steps", "2", "--warmup", "0", "--repeats", "1", "--width", "0.125", "--jit", "off",
                            "--no-overhead", "--output_dir", str(out), "--profile", str(tmp_path / "profiles"),
                            "--profile_length", "1",  # XLA off: thousands of traced ops per step
                            env={"PYTHONPATH": str(blocker.parent), "JAX_PLATFORMS": "cpu",
                                 worker.INJECT_VARIABLE: "oom:16"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "parent imported: []" in proc.stdout
    doc = json.loads((out / "benchmark.json").read_text())
    rows = {r["batch"]: r for r in doc["results"]}
    assert rows[8]["status"] == "ok" and rows[8]["backend"] == "jax", rows[8]["reason"]
    assert rows[8]["xla"] == "off" and rows[8]["replicas"] == 1
    # The trace read back with JAX's own reader (no TensorFlow here).
    assert rows[8]["profile"]["device_ms_per_step"] > 0, rows[8]["profile"]
    # The JAX out-of-memory error (XLA's RESOURCE_EXHAUSTED), classified without TensorFlow.
    assert rows[16]["status"] == "oom" and "RESOURCE_EXHAUSTED: injected out-of-memory" in rows[16]["reason"]
    for log in (out / "logs").iterdir():
        text = log.read_text()
        assert "worker: " in text and "on Keras backend jax" in text, log.name
        assert "tensorflow" not in text.lower(), (log.name, text[-2000:])


def test_trainer_overhead_is_measured_per_backend(both_backends):
    out, _ = both_backends
    doc = json.loads((out / "benchmark.json").read_text())
    md = (out / "benchmark.md").read_text()
    assert [run["backend"] for run in doc["runs"]] == ["tensorflow", "jax"]  # each measured below
    for run in doc["runs"]:
        backend, overhead = run["backend"], run["overhead"]
        assert overhead["status"] == "ok" and overhead["backend"] == backend, overhead["reason"]
        bare = next(r for r in doc["results"] if r["backend"] == backend)
        assert overhead["bare_time_per_batch_ms"] == bare["time_per_batch_ms"]
        assert len(overhead["trainer_window_ms"]) == 2 and overhead["trainer_measured_steps"] == 4
        # One metrics read, a device sync, per window: JAX's asynchronous steps are timed, not just enqueued.
        assert overhead["trainer_log_every"] == overhead["trainer_window_steps"] == 2
        # The ratio is the two medians' quotient; its size is the machine's business (docs/benchmark.md).
        assert overhead["ratio"] == pytest.approx(overhead["trainer_time_per_batch_ms"] / bare["time_per_batch_ms"])
        assert overhead["trainer_time_per_batch_ms"] == pytest.approx(statistics.median(overhead["trainer_window_ms"]))
        report = json.loads((out / f"{sweep_runs.OVERHEAD_DIR}-{backend}" / "report.json").read_text())
        assert report["config"]["backend"] == backend
        assert f"| {run['device']} | {tables.backend_label(run)} | float32 | 16 | on |" in md


def _fake_run(device, backend, precision=None):
    machine = {"kind": "GPU", "name": device, "backend": backend, "jax_matmul_precision": precision}
    return {"device": device, "backend": backend, "matmul_precision": precision, "machine": machine, "command": "x",
            "price": {"usd_per_hour": None, "accelerator": None, "source": None}}


def _fake_doc(run, policies, batches):
    rows = [results.make_row(run, p, b, True, {"status": "ok", "time_per_batch_ms": 10.0 + b / 256,
                                              "time_per_batch_min_ms": 9.0, "time_per_batch_max_ms": 12.0})
            for p in policies for b in batches]
    settings = {"synthetic": True, "width": 1.0, "repeats": 3, "steps": 100, "warmup": 5}
    run = dict(run, settings=settings, inputs={"image_shape": [28, 28, 1], "num_classes": 10}, overhead=None)
    run["price"] = dict(run["price"], description="no price known")
    return {"format": results.FORMAT, "runs": [run], "results": rows}


def test_merge_joins_phases_of_one_machine_and_keeps_repeats_apart():
    """The GPU script's phases: other configurations of the same device join its tables; float32 at
    matmul precision highest is its own series, with no speed-up against the default's float32."""
    default = _fake_run("NVIDIA H200", "jax", "default")
    phases = [_fake_doc(default, ("float32", "mixed_bfloat16"), (256, 2048)),
              _fake_doc(_fake_run("NVIDIA H200", "jax", "highest"), ("float32",), (256, 2048)),
              _fake_doc(default, ("float32", "mixed_bfloat16"), (4096,))]
    merged = results.merge(phases)
    assert {r["device"] for r in merged["results"]} == {"NVIDIA H200"}
    assert set(results.groups(merged["results"])) == {
        ("NVIDIA H200", "JAX, matmul precision default", True), ("NVIDIA H200", "JAX, matmul precision highest", True)}
    bf16 = [r for r in merged["results"] if r["policy"] == "mixed_bfloat16"]
    assert len(bf16) == 3 and all(r["speedup_vs_float32"] == pytest.approx(1.0) for r in bf16)
    md = tables.render_markdown(merged)
    assert "| NVIDIA H200 | on | float32 | 2048 | 18.0 | 18.0 |" in md
    again = results.merge(phases[:1] + phases[:1])
    assert [run["device"] for run in again["runs"]] == ["NVIDIA H200", "NVIDIA H200 (2)"]


def test_gpu_script_refuses_an_unknown_mode_and_missing_wheels(tmp_path):
    script = ROOT / "scripts" / "gpu_benchmark.sh"
    proc = subprocess.run(["bash", str(script), "fetch"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr == "error: unknown mode 'fetch': give no argument (run the benchmark) or 'download'\n"
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, ACGAN_GPU_WHEELS=str(tmp_path / "none"), OUT=str(tmp_path / "out")))
    assert proc.returncode == 2 and proc.stderr.startswith("error: no keras wheel in ") and proc.stderr.count("\n") == 1


def test_gpu_quality_script_refuses_an_argument_and_missing_wheels(tmp_path):
    script = ROOT / "scripts" / "gpu_quality.sh"
    proc = subprocess.run(["bash", str(script), "download"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith("error: unknown argument 'download': ")
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, ACGAN_GPU_WHEELS=str(tmp_path / "none"), OUT=str(tmp_path / "out")))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("error: no keras wheel in ") and "scripts/gpu_benchmark.sh download" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_advice_on_jax_speaks_of_xla_kernels():
    jax_cpu = dict(CPU_BF16, backend="jax")
    (line,) = advice.hardware_advice("mixed_float16", jax_cpu, {}, 64)
    assert "slower than float32" in line and "XLA's CPU kernels" in line and "TensorFlow" not in line
    (line,) = advice.hardware_advice("mixed_bfloat16", jax_cpu, {}, 64)
    assert "XLA's CPU code" in line and "oneDNN" not in line
