"""The benchmark sweep on JAX, in the JAX session: one sweep, read by every test here, whose rows cover what
JAX-specific the benchmark has to show.

As on the GPU machine, which has no TensorFlow, `import tensorflow` fails in every process: in this one
(tests/conftest.py's import_blocker) and, through a PYTHONPATH folder whose tensorflow/__init__.py raises
ImportError, in the sweep's parent and workers. The sweep runs through PARENT_PROBE, which reports what its
own process imported. Its configurations (--jit on: JAX compiles the whole step with XLA):
- float32 at batch 8: a JAX row (matmul precision, memory counter, a profile read back with JAX's own trace
  reader) with the trainer-overhead and G-EMA runs at its configuration;
- mixed_float16 at batch 8: the loss-scaled step under XLA (loss scales and skipped steps);
- every configuration under --jax_batch_norm fused, which the rows and the page record;
- batch 12: its float32 worker killed by SIGKILL, its mixed_float16 worker failing with JAX's out-of-memory
  error (tests/injection/sitecustomize.py), each injected once the worker has built its models: failures
  become rows, and the sweep goes on. A failure is one policy's only: what makes it a row happens after
  the worker dies, whatever its policy, so a batch of its own per fault would time two more workers.
The TensorFlow sweeps, and the pure checks of merged documents (the "Backends side by side" table among them),
are tests/measure/test_benchmark.py's. Every worker costs seconds of CPU to import JAX and compile the step,
hence one sweep and tiny sizes.
"""

import csv
import json
import statistics

import pytest

from acgan.bench import sweep_runs, tables
from acgan.measure import advice
from api_runs import BENCHMARK_FIGURES, run_parent_probe
from injection.sitecustomize import injected_env

OK, FAULTY = 8, 12
POLICIES = ("float32", "mixed_float16")
KILLED, OOM = ("float32", FAULTY), ("mixed_float16", FAULTY)  # the rows a fault ends
STEPS, WARMUP, REPEATS = 2, 1, 2


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """(output folder, benchmark.json, {(policy, batch): row}, the parent's CompletedProcess)."""
    tmp = tmp_path_factory.mktemp("jax-sweep")
    blocker = tmp / "no-tensorflow" / "tensorflow"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(
        "raise ImportError('tensorflow is blocked in this test')\n"
    )
    out = tmp / "out"
    proc = run_parent_probe(
        "--backends",
        "jax",
        "--synthetic",
        "--policies",
        ",".join(POLICIES),
        "--batches",
        f"{OK},{FAULTY}",
        "--jit",
        "on",
        "--steps",
        str(STEPS),
        "--warmup",
        str(WARMUP),
        "--repeats",
        str(REPEATS),
        "--width",
        "0.125",
        "--overhead_batch",
        str(OK),
        "--output_dir",
        str(out),
        "--profile",
        str(tmp / "profiles"),
        "--profile_length",
        "1",
        "--jax_batch_norm",
        "fused",
        env={
            "JAX_PLATFORMS": "cpu",
            **injected_env(
                faults=f"kill:{FAULTY}:{KILLED[0]},oom:{FAULTY}:{OOM[0]}",
                pythonpath=str(blocker.parent),
            ),
        },
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((out / "benchmark.json").read_text())
    return out, doc, {(r["policy"], r["batch"]): r for r in doc["results"]}, proc


@pytest.mark.slow
def test_jax_sweep_never_imports_tensorflow(sweep):
    """Neither the parent (which imports no framework at all) nor any worker: each log says its backend, and
    none mentions TensorFlow; the run's machine records JAX's version and no TensorFlow's."""
    out, doc, _, proc = sweep
    assert "parent imported: []" in proc.stdout
    (run,) = doc["runs"]
    assert run["backend"] == run["machine"]["backend"] == "jax"
    assert "tensorflow" not in run["machine"] and run["machine"]["jax"]
    # One log per worker: the probe, each configuration, the trainer-overhead and G-EMA runs.
    assert {p.name for p in (out / "logs").iterdir()} == {
        "probe-jax.log",
        *(f"jax-{p}-b{b}-xla_on.log" for p in POLICIES for b in (OK, FAULTY)),
        f"overhead-trainer-jax-float32-b{OK}-xla_on.log",
        f"overhead-ema-jax-float32-b{OK}-xla_on.log",
    }
    for log in (out / "logs").iterdir():
        text = log.read_text()
        assert "worker: " in text and "on Keras backend jax" in text, log.name
        assert "tensorflow" not in text.lower(), (log.name, text[-2000:])


def test_jax_rows_name_their_backend_precision_and_memory_counter(sweep):
    out, doc, rows, _ = sweep
    (run,) = doc["runs"]
    assert run["matmul_precision"] == run["machine"]["jax_matmul_precision"] == "default"
    assert {(r["policy"], r["batch"], r["jit"]) for r in doc["results"]} == {
        (p, b, True) for p in POLICIES for b in (OK, FAULTY)
    }
    # --jax_batch_norm fused: every worker traced the fused batch norm, and each row and the page say so.
    assert (
        "- JAX formulations: transposed convolutions adjoint, batch norm fused"
        in (out / "benchmark.md").read_text()
    )
    for policy in POLICIES:
        r = rows[(policy, OK)]
        assert r["status"] == "ok", r["reason"]
        assert (r["jax_conv_transpose"], r["jax_batch_norm"]) == ("adjoint", "fused")
        assert r["backend"] == "jax" and r["xla"] == "step" and r["replicas"] == 1
        assert r["time_per_batch_ms"] > 0 and r["peak_memory_bytes"] > 0
        assert r["steps_run"] == 1 + WARMUP + REPEATS * STEPS
        assert r["matmul_precision"] == "default" and "JAX runtime included" in r["memory_counter"]
        # The trace read back with JAX's own reader (no TensorFlow here).
        assert r["profile"]["device_ms_per_step"] > 0 and r["profile"]["steps"] == 1, r["profile"]
    assert rows[("float32", OK)]["skipped_steps"] == {"d": 0, "g": 0, "q": 0}
    md = (out / "benchmark.md").read_text()
    assert f"### {run['device']}, JAX, matmul precision default, XLA on" in md
    assert f"JAX {run['machine']['jax']} (matmul precision default)" in md
    with open(out / "benchmark.csv", newline="") as f:
        assert {line["backend"] for line in csv.DictReader(f)} == {"jax"}


def test_trainer_overhead_is_measured_on_jax(sweep):
    out, doc, rows, _ = sweep
    (run,) = doc["runs"]
    overhead = run["overhead"]
    assert overhead["status"] == "ok" and overhead["backend"] == "jax", overhead["reason"]
    assert (overhead["policy"], overhead["batch"], overhead["jit"]) == ("float32", OK, True)
    bare = rows[("float32", OK)]
    assert overhead["bare_time_per_batch_ms"] == bare["time_per_batch_ms"]
    assert (
        len(overhead["trainer_window_ms"]) == REPEATS
        and overhead["trainer_measured_steps"] == REPEATS * STEPS
    )
    # One metrics read, a device sync, per window: JAX's asynchronous steps are timed, not just enqueued.
    assert overhead["trainer_log_every"] == overhead["trainer_window_steps"] == STEPS
    # The ratio is the two medians' quotient; its size is the machine's business (docs/benchmark.md).
    assert overhead["ratio"] == pytest.approx(
        overhead["trainer_time_per_batch_ms"] / bare["time_per_batch_ms"]
    )
    assert overhead["trainer_time_per_batch_ms"] == pytest.approx(
        statistics.median(overhead["trainer_window_ms"])
    )
    # One backend in the sweep: the trainer's run folder has no backend suffix.
    report = json.loads((out / sweep_runs.OVERHEAD_DIR / "report.json").read_text())
    assert report["config"]["backend"] == "jax"
    md = (out / "benchmark.md").read_text()
    assert f"| {run['device']} | {tables.backend_label(run)} | float32 | {OK} | on |" in md
    # G-EMA's cost on JAX too: one more bare step, with the average the preset does not keep.
    ema = overhead["ema"]
    assert (
        ema["status"] == "ok"
        and ema["decay"] == sweep_runs.EMA_PROBE_DECAY
        and bare["ema_decay"] == 0
    )
    assert ema["without_ms"] == bare["time_per_batch_ms"] and ema["with_ms"] > 0
    assert f"G-EMA on {run['device']} ({tables.backend_label(run)})" in md


def test_mixed_float16_with_xla_reports_loss_scales_and_skipped_steps(sweep):
    """The loss-scaled step under XLA (on JAX, --jit on compiles the whole step).

    From the initial 2^15, each skipped step halves an optimizer's scale (it grows only after 2000
    good steps), so every reported scale must be 2^15 / 2^(its skipped steps)."""
    out, _, rows, _ = sweep
    row = rows[("mixed_float16", OK)]
    assert row["status"] == "ok", row["reason"]
    assert (row["policy"], row["batch"], row["jit"], row["xla"]) == (
        "mixed_float16",
        OK,
        True,
        "step",
    )
    assert row["steps_run"] == 1 + WARMUP + REPEATS * STEPS
    skipped, scales = row["skipped_steps"], row["loss_scale"]
    assert set(skipped) == set(scales) == {"d", "g", "q"}
    # 2^15 overflows the first steps of a fresh run (measured here: 3, 1 and 5 skipped; scales 4096,
    # 16384, 1024), so the skip counting is exercised, not only its zero.
    assert sum(skipped.values()) > 0, skipped
    for name in "dgq":
        assert 0 <= skipped[name] <= row["steps_run"], name
        assert scales[name] == 2.0**15 / 2 ** skipped[name], (name, skipped, scales)
    with open(out / "benchmark.csv", newline="") as f:
        (line,) = (
            line
            for line in csv.DictReader(f)
            if (line["policy"], line["batch"]) == ("mixed_float16", str(OK))
        )
    assert [int(line[f"{k}_skipped"]) for k in "dgq"] == [skipped[k] for k in "dgq"]
    md = (out / "benchmark.md").read_text()
    assert "XLA on" in md and f"| {'/'.join(str(skipped[k]) for k in 'dgq')} |" in md


def test_failing_configurations_are_recorded_and_the_sweep_goes_on(sweep):
    """A worker killed by SIGKILL (as the kernel's out-of-memory killer does) and JAX's out-of-memory error
    (XLA's RESOURCE_EXHAUSTED, classified without TensorFlow) each become a row in one line, at the policy
    it was injected at; the sweep goes on to time the rest and write its tables and figures."""
    out, _, rows, _ = sweep
    killed, oom = rows[KILLED], rows[OOM]
    assert killed["status"] == "failed" and "SIGKILL" in killed["reason"]
    assert oom["status"] == "oom" and "RESOURCE_EXHAUSTED: injected out-of-memory" in oom["reason"]
    assert "\n" not in killed["reason"] + oom["reason"]
    assert killed["time_per_1000_samples_ms"] is None and oom["time_per_1000_samples_ms"] is None
    md = (out / "benchmark.md").read_text()
    assert (
        "**failed**: worker killed by SIGKILL" in md
        and "**oom**: JaxRuntimeError: RESOURCE_EXHAUSTED" in md
    )
    for name in BENCHMARK_FIGURES:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def test_advice_on_jax_speaks_of_xla_kernels():
    """Pure: the advice for a JAX worker's CPU names XLA's kernels, never TensorFlow's (nor oneDNN)."""
    jax_cpu = {
        "kind": "CPU",
        "name": "EPYC",
        "cpu_model": "EPYC",
        "cpu_flags": ["avx2", "avx512_bf16"],
        "backend": "jax",
    }
    (line,) = advice.hardware_advice("mixed_float16", jax_cpu, {}, 64)
    assert (
        "slower than float32" in line and "XLA's CPU kernels" in line and "TensorFlow" not in line
    )
    (line,) = advice.hardware_advice("mixed_bfloat16", jax_cpu, {}, 64)
    assert "XLA's CPU code" in line and "oneDNN" not in line
