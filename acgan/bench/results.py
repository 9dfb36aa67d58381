"""Benchmark results, pure of processes: a configuration's row from its worker's measurement (make_row),
the speed-ups against float32, the rows grouped as the tables show them, and benchmark.json files read
and merged."""

import itertools
import json
from datetime import datetime
from pathlib import Path

from acgan.errors import UserError
from acgan.measure import flops, prices, timing
from acgan.measure.backend_labels import backend_label, backend_of

FORMAT = "acgan-benchmark/1"


def make_row(run, policy, batch, jit, result):
    """One results row: the configuration, the machine, the measurement and what follows from it."""
    machine, price = run["machine"], run["price"]
    row = {
        "device": run["device"],
        "backend": backend_of(run),
        # float32 matrix products on JAX: "default" lets a GPU use TF32, "highest" keeps full float32.
        "matmul_precision": result.get("matmul_precision") or run.get("matmul_precision"),
        "machine": machine,
        "command": run["command"],
        "policy": policy,
        "batch": batch,
        "jit": jit,
        "status": result["status"],
        "reason": result.get("reason"),
        "compile_seconds": result.get("compile_seconds"),
        "time_per_batch_ms": result.get("time_per_batch_ms"),  # median over repeats
        "time_per_batch_min_ms": result.get("time_per_batch_min_ms"),
        "time_per_batch_max_ms": result.get("time_per_batch_max_ms"),
        "repeat_ms": result.get("repeat_ms"),
        "time_per_1000_samples_ms": None,
        "samples_per_second": None,
        "replicas": result.get("replicas") or run.get("replicas") or 1,
        "xla": result.get("xla"),  # as run: "step", "forward_backward", "tpu" or "off"
        "samples_per_second_per_replica": None,
        "peak_memory_bytes": result.get("peak_memory_bytes"),
        "baseline_memory_bytes": result.get("baseline_memory_bytes"),
        "memory_counter": result.get("memory_counter"),
        "skipped_steps": result.get("skipped_steps"),
        "loss_scale": result.get("loss_scale"),
        "ema_decay": result.get("ema_decay"),
        # the JAX layers' formulations (--jax_conv_transpose, --jax_batch_norm); None on TensorFlow
        "jax_conv_transpose": result.get("jax_conv_transpose"),
        "jax_batch_norm": result.get("jax_batch_norm"),
        "steps_run": result.get("steps_run"),
        "load_average": result.get("load_average"),
        "speedup_vs_float32": None,
        "price_per_hour": None,
        "price_entry": price["accelerator"] or price["source"],
        "cost_per_million_batches": None,
        "worker_seconds": result.get("worker_seconds"),
        # measure.profile's summary of a few more steps, with --profile
        "profile": result.get("profile"),
        "log": result.get("log"),
    }
    ms = (row["status"] == "ok" and row["time_per_batch_ms"]) or None  # None: nothing timed
    if ms:
        row["time_per_1000_samples_ms"] = ms * 1000.0 / batch
        row["samples_per_second"] = batch / (ms / 1e3)
        row["samples_per_second_per_replica"] = row["samples_per_second"] / row["replicas"]
    row.update(
        flops.arithmetic_summary(
            result.get("flops_per_batch"),
            result.get("flops_counted_by"),
            ms,
            machine,
            policy,
            row["replicas"],
            device_name=run["device"],
            matmul_precision=row["matmul_precision"],
        )
    )
    units, _ = prices.priced_units(price, row["replicas"], machine=machine)
    cost = timing.cost_summary(ms, price["usd_per_hour"], units)
    row.update(
        price_per_hour=cost["price_per_hour"],
        cost_per_million_batches=cost["cost_per_million_batches"],
    )
    return row


def add_speedups(rows):
    """speedup_vs_float32 = float32's time per batch / this policy's, same device, backend (and JAX matmul
    precision), XLA setting and batch."""
    float32 = {
        (r["device"], backend_label(r), r["jit"], r["batch"]): r["time_per_batch_ms"]
        for r in rows
        if r["policy"] == "float32" and r["status"] == "ok"
    }
    for r in rows:
        base = float32.get((r["device"], backend_label(r), r["jit"], r["batch"]))
        ok = r["status"] == "ok" and r["policy"] != "float32" and base and r["time_per_batch_ms"]
        r["speedup_vs_float32"] = base / r["time_per_batch_ms"] if ok else None
    return rows


def groups(rows, key=lambda r: (r["device"], backend_label(r), r["jit"])):
    """{key(row): rows}, in first-seen order; by default the tables' {(device, backend label, jit): rows}."""
    out = {}
    for r in rows:
        out.setdefault(key(r), []).append(r)
    return out


def backend_comparison(rows):
    """[(device, jit, policy, batch, {backend label: ms per batch})] where one configuration ran on more
    than one backend (or JAX matmul precision), in first-seen order."""
    timed = groups(
        [r for r in rows if r["status"] == "ok" and r["time_per_batch_ms"]],
        key=lambda r: (r["device"], r["jit"], r["policy"], r["batch"]),
    )
    times = {
        k: {backend_label(r): r["time_per_batch_ms"] for r in group} for k, group in timed.items()
    }
    return [k + (t,) for k, t in times.items() if len(t) > 1]


def load_benchmark(path):
    """A benchmark.json as a dict; UserError for a missing, unreadable or foreign file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"benchmark file {path} does not exist")
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path} is not a valid benchmark.json ({type(e).__name__})") from None
    if (
        not isinstance(doc, dict)
        or doc.get("format") != FORMAT
        or not isinstance(doc.get("results"), list)
    ):
        raise UserError(
            f"{path} is not a benchmark.json written by python -m acgan.benchmark (format {FORMAT})"
        )
    return doc


def _configuration(row):
    return (row["device"], backend_label(row), row["jit"], row["policy"], row["batch"])


def merge(docs, sources=None, command=None):
    """One document holding the runs and rows of several. Files whose rows are other configurations of the
    same device (label), backend and matmul precision join its tables (e.g. one machine timed in two
    sweeps); a file that repeats a configuration already merged gets its device label ' (2)', so both
    stay apart."""
    runs, rows, labels = [], [], set()
    for i, doc in enumerate(docs):
        taken = {_configuration(r) for r in rows}
        clash = {r["device"] for r in doc["results"] if _configuration(r) in taken}
        renamed = {}
        for label in dict.fromkeys(run["device"] for run in doc["runs"]):
            if label in clash:
                n = next(n for n in itertools.count(2) if f"{label} ({n})" not in labels)
                renamed[label] = f"{label} ({n})"
            labels.add(renamed.get(label, label))
        runs += [
            dict(
                run,
                device=renamed.get(run["device"], run["device"]),
                source=str(sources[i]) if sources else run.get("source"),
            )
            for run in doc["runs"]
        ]
        rows += [dict(r, device=renamed.get(r["device"], r["device"])) for r in doc["results"]]
    add_speedups(rows)
    return {
        "format": FORMAT,
        "command": command,
        "created": datetime.now().isoformat(timespec="seconds"),
        "runs": runs,
        "results": rows,
    }
