"""Benchmark results as files: loading and merging benchmark.json, the CSV, the markdown tables, the figures."""
import json
import math
from datetime import datetime
from pathlib import Path

from acgan.config import POLICIES
from acgan.errors import UserError
from acgan.measure.backend_labels import backend_label, backend_of, describe_backend, precision_of
from acgan.util.files import write_json

FORMAT = "acgan-benchmark/1"
BUSY_LOAD = 1.5   # load average per core above which the report warns that others shared the CPU


def add_speedups(rows):
    """speedup_vs_float32 = float32's time per batch / this policy's, same device, backend (and JAX matmul
    precision), XLA setting and batch."""
    float32 = {
        (r["device"], backend_label(r), r["jit"], r["batch"]): r["time_per_batch_ms"]
        for r in rows if r["policy"] == "float32" and r["status"] == "ok"
    }
    for r in rows:
        base = float32.get((r["device"], backend_label(r), r["jit"], r["batch"]))
        ok = r["status"] == "ok" and r["policy"] != "float32" and base and r["time_per_batch_ms"]
        r["speedup_vs_float32"] = base / r["time_per_batch_ms"] if ok else None
    return rows



def describe_machine(label, machine):
    if machine.get("kind") == "GPU":
        what = f"GPU {machine.get('name')} (compute capability {machine.get('compute_capability')})"
    elif machine.get("kind") == "TPU":
        what = (f"{machine.get('name')}: {machine.get('count')} chip(s), {machine.get('tpu_cores')} TensorFlow "
                f"TPU device(s); host CPU {machine.get('cpu_model')}")
    else:
        flags = ", ".join(machine.get("cpu_flags") or []) or "none of interest"
        what = f"CPU {machine.get('cpu_model')} ({machine.get('cpu_cores')} cores; flags: {flags})"
    named = f"{label}: " if label != machine.get("name") else ""
    if machine.get("backend") == "jax":
        versions = f"JAX {machine.get('jax')} (matmul precision {machine.get('jax_matmul_precision') or 'default'})"
    else:
        versions = f"TensorFlow {machine.get('tensorflow')}"
    return f"{named}{what}; {versions}, Keras {machine.get('keras')}"



def _priced(row, replicas):
    """What a table price was paid for: chips on a TPU (replicas are TensorCores there), else devices."""
    machine = row.get("machine") or {}
    if machine.get("kind") == "TPU":
        chips = max(1, math.ceil(replicas / (machine.get("replicas_per_chip") or 1) - 1e-9))
        return f"{chips} TPU chip(s)"
    return f"{replicas} devices"


def load_benchmark(path):
    """A benchmark.json as a dict; UserError for a missing, unreadable or foreign file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"benchmark file {path} does not exist")
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path} is not a valid benchmark.json ({type(e).__name__})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("results"), list):
        raise UserError(f"{path} is not a benchmark.json written by python -m acgan.benchmark (format {FORMAT})")
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
                n = 2
                while f"{label} ({n})" in labels:
                    n += 1
                renamed[label] = f"{label} ({n})"
            labels.add(renamed.get(label, label))
        for run in doc["runs"]:
            label = run["device"]
            runs.append(dict(run, device=renamed.get(label, label),
                             source=str(sources[i]) if sources else run.get("source")))
        rows += [dict(r, device=renamed.get(r["device"], r["device"])) for r in doc["results"]]
    add_speedups(rows)
    return {"format": FORMAT, "command": command, "created": datetime.now().isoformat(timespec="seconds"),
            "runs": runs, "results": rows}


# ---------------------------------------------------------------------------------------------------
# Tables


CSV_COLUMNS = (
    "device", "kind", "accelerator", "compute_capability", "cpu_model", "cpu_flags", "cpu_cores",
    "backend", "matmul_precision", "tensorflow", "jax", "keras", "policy", "jit", "batch", "status", "reason", "compile_seconds",
    "time_per_batch_ms", "time_per_batch_min_ms", "time_per_batch_max_ms", "time_per_1000_samples_ms",
    "samples_per_second", "replicas", "samples_per_second_per_replica", "speedup_vs_float32", "peak_memory_bytes", "memory_counter", "load_average",
    "d_skipped", "g_skipped", "q_skipped", "price_per_hour", "price_entry", "cost_per_million_batches",
    "flops_per_batch", "flops_counted_by", "tflops", "peak_tflops", "peak_dtype", "share_of_peak",
    "command",
)


def csv_rows(doc):
    """The results flattened to CSV_COLUMNS (machine fields and skipped steps spread out)."""
    out = []
    for r in doc["results"]:
        m, skipped = r.get("machine") or {}, r.get("skipped_steps") or {}
        flat = dict(r)
        flat.update(
            kind=m.get("kind"), accelerator=m.get("name"), compute_capability=m.get("compute_capability"),
            cpu_model=m.get("cpu_model"), cpu_flags=" ".join(m.get("cpu_flags") or []),
            cpu_cores=m.get("cpu_cores"), tensorflow=m.get("tensorflow"), jax=m.get("jax"), keras=m.get("keras"),
            backend=backend_of(r), matmul_precision=precision_of(r),
            d_skipped=skipped.get("d"), g_skipped=skipped.get("g"), q_skipped=skipped.get("q"),
        )
        out.append({c: flat.get(c) for c in CSV_COLUMNS})
    return out


def render_csv(doc):
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in csv_rows(doc):
        # repr keeps every float exact, so the CSV holds the JSON's numbers.
        writer.writerow({k: "" if v is None else repr(v) if isinstance(v, float) else v for k, v in row.items()})
    return buffer.getvalue()


def _f(value, digits=1, suffix=""):
    return "n/a" if value is None else f"{value:,.{digits}f}{suffix}"


def groups(rows):
    """{(device, backend label, jit): rows}, in first-seen order."""
    out = {}
    for r in rows:
        out.setdefault((r["device"], backend_label(r), r["jit"]), []).append(r)
    return out


def _group_title(device, backend, jit):
    return f"{device}, {backend}, XLA {'on' if jit else 'off'}"


def backend_comparison(rows):
    """[(device, jit, policy, batch, {backend label: ms per batch})] where one configuration ran on more
    than one backend (or JAX matmul precision), in first-seen order."""
    out = {}
    for r in rows:
        if r["status"] == "ok" and r["time_per_batch_ms"]:
            key = (r["device"], r["jit"], r["policy"], r["batch"])
            out.setdefault(key, {})[backend_label(r)] = r["time_per_batch_ms"]
    return [key + (times,) for key, times in out.items() if len(times) > 1]


def render_markdown(doc):
    runs, rows = doc["runs"], doc["results"]
    lines = ["# Mixed-precision benchmark", ""]
    if doc.get("command"):
        lines += [f"Command: `{doc['command']}`", ""]
    lines += ["## Devices", ""]
    for run in runs:
        s = run["settings"]
        source = "synthetic uint8 tensors" if s.get("synthetic") else f"dataset {s.get('dataset')}"
        lines += [
            f"### {run['device']}, {backend_label(run)}",
            "",
            f"- machine: {describe_machine(run['device'], run['machine'])}",
            f"- backend: {describe_backend(run)}" + (
                " (float32 matrix products may run in TF32 on a GPU that has it; JAX_DEFAULT_MATMUL_PRECISION=highest "
                "keeps them float32)" if precision_of(run) == "default" else ""),
            f"- command: `{run.get('command')}`" + (f" (from {run['source']})" if run.get("source") else ""),
            f"- timing: bare compiled step on device-resident {source} "
            f"({'x'.join(map(str, run['inputs']['image_shape']))}, {run['inputs']['num_classes']} classes), "
            f"width {s['width']}; {s['repeats']} timings of {s['steps']} steps each after the compile step "
            f"and {s['warmup']} warm-up step{'' if s['warmup'] == 1 else 's'}, each timing ending on a device sync; median [min-max] shown",
            f"- price: {run['price']['description']}",
        ]
        loads = [r["load_average"] for r in rows if r["device"] == run["device"] and backend_label(r) == backend_label(run)
                 and r.get("load_average") is not None]
        cores = run["machine"].get("cpu_cores") or 1
        if loads:
            busy = max(loads) > BUSY_LOAD * cores
            lines.append(
                f"- load: the 1-minute load average after the timings reached {max(loads):.1f} on {cores} cores"
                + (" — **other processes competed for the CPU: these timings are inflated and noisy**" if busy else "")
            )
        if run["price"].get("alternatives"):
            lines.append(f"- other entries for {run['price']['accelerator']}: {'; '.join(run['price']['alternatives'])}")
        for policy, advice in (run.get("advice") or {}).items():
            lines += [f"- advice ({policy}): {a}" for a in advice]
        lines.append("")

    mixed = [p for p in POLICIES[1:] if any(r["policy"] == p for r in rows)]
    if mixed and any(r["policy"] == "float32" for r in rows):
        lines += ["## Speed-up over float32", "",
                  "Time per batch under float32 divided by time per batch under the mixed policy "
                  "(above 1: mixed precision is faster).", ""]
        for (device, backend, jit), group in groups(rows).items():
            if not any(r["policy"] in mixed for r in group):  # e.g. float32 alone at another matmul precision
                continue
            batches = sorted({r["batch"] for r in group})
            lines += [f"### {_group_title(device, backend, jit)}", "", "| batch | " + " | ".join(mixed) + " |",
                      "|---:|" + "---:|" * len(mixed)]
            for b in batches:
                cells = []
                for p in mixed:
                    r = next((r for r in group if r["batch"] == b and r["policy"] == p), None)
                    cells.append("—" if r is None else f"{r['speedup_vs_float32']:.2f}×"
                                 if r["speedup_vs_float32"] else r["status"] if r["status"] != "ok" else "n/a")
                lines.append(f"| {b} | " + " | ".join(cells) + " |")
            lines.append("")

    compared = backend_comparison(rows)
    if compared:
        names = list(dict.fromkeys(b for *_, times in compared for b in times))
        lines += ["## Backends side by side", "",
                  "Milliseconds per batch of the same configuration on each backend (bare compiled step). "
                  f"Ratio: ms on {names[0]} / ms on the fastest other; below 1, {names[0]} is faster.", "",
                  "| device | XLA | policy | batch | " + " | ".join(names) + " | fastest | ratio |",
                  "|---|---|---|---:|" + "---:|" * len(names) + "---|---:|"]
        for device, jit, policy, batch, times in compared:
            fastest = min(times, key=times.get)
            others = [t for b, t in times.items() if b != names[0]]
            ratio = f"{times[names[0]] / min(others):.2f}" if names[0] in times and others else "—"
            lines.append(f"| {device} | {'on' if jit else 'off'} | {policy} | {batch} | "
                         + " | ".join(_f(times.get(b)) if b in times else "—" for b in names)
                         + f" | {fastest} | {ratio} |")
        lines.append("")

    lines += ["## Results", ""]
    for (device, backend, jit), group in groups(rows).items():
        lines += [
            f"### {_group_title(device, backend, jit)}", "",
            "| batch | policy | ms per batch | ms per 1000 samples | samples/s | speed-up | compile s "
            "| peak memory MiB | skipped d/g/q | $ per 10^6 batches |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in sorted(group, key=lambda r: (r["batch"], POLICIES.index(r["policy"]) if r["policy"] in POLICIES else 9)):
            if r["status"] != "ok":
                lines.append(f"| {r['batch']} | {r['policy']} | **{r['status']}**: {r['reason']} |"
                             + " |" * 7)
                continue
            skipped = r.get("skipped_steps") or {}
            memory = r.get("peak_memory_bytes")
            lines.append(
                f"| {r['batch']} | {r['policy']} "
                f"| {_f(r['time_per_batch_ms'], 1)} [{_f(r['time_per_batch_min_ms'], 1)}-{_f(r['time_per_batch_max_ms'], 1)}] "
                f"| {_f(r['time_per_1000_samples_ms'], 1)} | {_f(r['samples_per_second'], 0)} "
                f"| {_f(r['speedup_vs_float32'], 2, '×') if r['speedup_vs_float32'] else '—'} "
                f"| {_f(r['compile_seconds'], 1)} | {_f(memory / 2**20 if memory else None, 0)} "
                f"| {'/'.join(str(skipped.get(k, '?')) for k in 'dgq')} "
                f"| {_f(r['cost_per_million_batches'], 2) if r['cost_per_million_batches'] is not None else 'no price'} |"
            )
        replicas = max(r.get("replicas") or 1 for r in group)
        if replicas > 1:
            modes = ", ".join(sorted({r["xla"] for r in group if r.get("xla")})) or "n/a"
            lines += ["", f"{replicas} replicas: batch and samples/s are global (per replica: divide by "
                      f"{replicas}); the price is that of all {_priced(group[0], replicas)}. XLA as run: {modes}."]
        counters = {r.get("memory_counter") for r in group if r.get("memory_counter")}
        if counters:
            lines += ["", f"Peak memory: {'; '.join(sorted(counters))}."]
        lines.append("")

    lines += render_arithmetic(rows)
    lines += render_profiles(rows)

    overheads = [(run["device"], backend_label(run), run["overhead"]) for run in runs if run.get("overhead")]
    if overheads:
        lines += ["## Trainer overhead", "",
                  "The full training loop (input pipeline: tf.data on TensorFlow, numpy batches prefetched to the "
                  "device on JAX; metric reads, TensorBoard, progress bar) against the bare compiled step at the "
                  "same configuration on the same backend: the median over the same number of windows of the "
                  "same number of steps on both sides. The loop reads the metrics (a device sync) every "
                  "`log_every` steps, so every window holds as many reads.", "",
                  "| device | backend | policy | batch | XLA | log_every | full loop ms per batch | bare step ms per batch | ratio |",
                  "|---|---|---|---:|---|---:|---:|---:|---:|"]
        for device, backend, o in overheads:
            ratio = f"{o['ratio']:.2f}" if o["ratio"] else f"{o['status']}: {o['reason']}"
            lines.append(f"| {device} | {backend} | {o['policy']} | {o['batch']} | {'on' if o['jit'] else 'off'} "
                         f"| {o.get('trainer_log_every') or 'n/a'} "
                         f"| {_f(o['trainer_time_per_batch_ms'])} | {_f(o['bare_time_per_batch_ms'])} | {ratio} |")
        lines.append("")
    return "\n".join(lines)


def render_arithmetic(rows):
    """The "FLOPs and share of peak" section: per configuration, the step's FLOPs per batch, the TFLOP/s
    achieved and the share of the device's peak for the policy's matrix dtype."""
    counted = [r for r in rows if r["status"] == "ok" and r.get("flops_per_batch")]
    if not counted:
        return []
    how = sorted({r["flops_counted_by"] for r in counted})
    lines = ["## FLOPs and share of peak", "",
             "FLOPs of one step (D, G and Q, forward and backward) "
             + " and ".join({"xla": "from XLA's cost analysis of the compiled step",
                             "layers": "counted from the layers' matrix products and convolutions"}[h] for h in how)
             + "; TFLOP/s at the median time per batch; the peak is the device's dense peak for the dtype "
             "its matrix products run in (acgan/measure/device_peaks.json; docs/benchmark.md#flops-and-share-of-peak).",
             "", "| device | backend | XLA | batch | policy | GFLOP per batch | counted | TFLOP/s | peak TFLOP/s | share of peak |",
             "|---|---|---|---:|---|---:|---|---:|---:|---:|"]
    for r in counted:
        peak = f"{r['peak_tflops']:,.1f} ({r['peak_dtype']})" if r.get("peak_tflops") else f"unknown ({r['peak_dtype']})"
        share = f"{r['share_of_peak']:.1%}" if r.get("share_of_peak") is not None else "n/a"
        lines.append(f"| {r['device']} | {backend_label(r)} | {'on' if r['jit'] else 'off'} | {r['batch']} | {r['policy']} "
                     f"| {_f(r['flops_per_batch'] / 1e9, 2)} | {r['flops_counted_by']} | {_f(r.get('tflops'), 2)} "
                     f"| {peak} | {share} |")
    return lines + [""]


def render_profiles(rows):
    """With --profile: per configuration, the device time per step and its groups (measure.profile)."""
    failed = [r for r in rows if r["status"] == "ok" and (r.get("profile") or {}).get("error")]
    profiled = [r for r in rows if r["status"] == "ok" and r.get("profile") and r not in failed]
    if not profiled and not failed:
        return []
    from acgan.measure.profile import GROUPS

    shown = [g for g in GROUPS if any(r["profile"]["groups"].get(g) for r in profiled)]
    lines = ["## Where the device time goes", "",
             "From a profiler trace of a few more steps of each configuration, after its timings "
             "(milliseconds of device time per step; on a CPU summed over its threads). Each configuration's "
             "folder holds the trace and profile.md, its top operations.", "",
             "| device | backend | XLA | batch | policy | device ms per step | " + " | ".join(shown) + " | folder |",
             "|---|---|---|---:|---|---:|" + "---:|" * len(shown) + "---|"]
    for r in profiled:
        p = r["profile"]
        cells = []
        for g in shown:
            ms = p["groups"].get(g) or 0.0
            share = ms / p["device_ms_per_step"] if p["device_ms_per_step"] else 0.0
            cells.append(f"{ms:,.2f} ({share:.0%})")
        lines.append(f"| {r['device']} | {backend_label(r)} | {'on' if r['jit'] else 'off'} | {r['batch']} | {r['policy']} "
                     f"| {p['device_ms_per_step']:,.2f} | " + " | ".join(cells) + f" | `{Path(p['dir']).name}` |")
    lines += [f"- {r['device']}, {r['policy']}, batch {r['batch']}: no profile ({r['profile']['error']})" for r in failed]
    return lines + [""]


def write_outputs(doc, output_dir):
    """benchmark.json, benchmark.csv, benchmark.md and the figures, each written atomically."""
    from acgan.bench import plots
    from acgan.util.files import write_atomically

    output_dir = Path(output_dir)
    figures = plots.write_figures(doc, output_dir)
    write_atomically(output_dir / "benchmark.csv", render_csv(doc))
    write_atomically(output_dir / "benchmark.md", render_markdown(doc))
    # Last: a benchmark.json in a folder means the rest is there too.
    write_json(output_dir / "benchmark.json", dict(doc, figures=sorted(p.name for p in figures.values())))
    return output_dir

