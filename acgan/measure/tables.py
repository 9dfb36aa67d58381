"""Benchmark results as files: loading and merging benchmark.json, the CSV, the markdown tables, the figures."""
import json
import math
from datetime import datetime
from pathlib import Path

from acgan.config import POLICIES
from acgan.errors import UserError
from acgan.util.files import write_json

FORMAT = "acgan-benchmark/1"
BUSY_LOAD = 1.5   # load average per core above which the report warns that others shared the CPU


def add_speedups(rows):
    """speedup_vs_float32 = float32's time per batch / this policy's, same device, XLA setting and batch."""
    float32 = {
        (r["device"], r["jit"], r["batch"]): r["time_per_batch_ms"]
        for r in rows if r["policy"] == "float32" and r["status"] == "ok"
    }
    for r in rows:
        base = float32.get((r["device"], r["jit"], r["batch"]))
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
    return f"{named}{what}; TensorFlow {machine.get('tensorflow')}, Keras {machine.get('keras')}"



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


def merge(docs, sources=None, command=None):
    """One document holding the runs and rows of several; a device label seen in two files gets ' (2)'."""
    runs, rows, seen = [], [], {}
    for i, doc in enumerate(docs):
        renamed = {}
        for run in doc["runs"]:
            label = run["device"]
            if label in seen and seen[label] != i:
                n = 2
                while f"{label} ({n})" in seen:
                    n += 1
                renamed[label] = f"{label} ({n})"
            seen.setdefault(renamed.get(label, label), i)
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
    "tensorflow", "keras", "policy", "jit", "batch", "status", "reason", "compile_seconds",
    "time_per_batch_ms", "time_per_batch_min_ms", "time_per_batch_max_ms", "time_per_1000_samples_ms",
    "samples_per_second", "replicas", "samples_per_second_per_replica", "speedup_vs_float32", "peak_memory_bytes", "memory_counter", "load_average",
    "d_skipped", "g_skipped", "q_skipped", "price_per_hour", "price_entry", "cost_per_million_batches",
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
            cpu_cores=m.get("cpu_cores"), tensorflow=m.get("tensorflow"), keras=m.get("keras"),
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
    """{(device, jit): rows}, in first-seen order."""
    out = {}
    for r in rows:
        out.setdefault((r["device"], r["jit"]), []).append(r)
    return out


def _group_title(device, jit):
    return f"{device}, XLA {'on' if jit else 'off'}"


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
            f"### {run['device']}",
            "",
            f"- machine: {describe_machine(run['device'], run['machine'])}",
            f"- command: `{run.get('command')}`" + (f" (from {run['source']})" if run.get("source") else ""),
            f"- timing: bare compiled step on device-resident {source} "
            f"({'x'.join(map(str, run['inputs']['image_shape']))}, {run['inputs']['num_classes']} classes), "
            f"width {s['width']}; {s['repeats']} timings of {s['steps']} steps each after the compile step "
            f"and {s['warmup']} warm-up step{'' if s['warmup'] == 1 else 's'}, each timing ending on a device sync; median [min-max] shown",
            f"- price: {run['price']['description']}",
        ]
        loads = [r["load_average"] for r in rows if r["device"] == run["device"] and r.get("load_average") is not None]
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
        for (device, jit), group in groups(rows).items():
            batches = sorted({r["batch"] for r in group})
            lines += [f"### {_group_title(device, jit)}", "", "| batch | " + " | ".join(mixed) + " |",
                      "|---:|" + "---:|" * len(mixed)]
            for b in batches:
                cells = []
                for p in mixed:
                    r = next((r for r in group if r["batch"] == b and r["policy"] == p), None)
                    cells.append("—" if r is None else f"{r['speedup_vs_float32']:.2f}×"
                                 if r["speedup_vs_float32"] else r["status"] if r["status"] != "ok" else "n/a")
                lines.append(f"| {b} | " + " | ".join(cells) + " |")
            lines.append("")

    lines += ["## Results", ""]
    for (device, jit), group in groups(rows).items():
        lines += [
            f"### {_group_title(device, jit)}", "",
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

    overheads = [(run["device"], run["overhead"]) for run in runs if run.get("overhead")]
    if overheads:
        lines += ["## Trainer overhead", "",
                  "The full training loop (tf.data input pipeline, metric reads, TensorBoard, progress bar) "
                  "against the bare compiled step at the same configuration: the median over the same number "
                  "of windows of the same number of steps on both sides.", "",
                  "| device | policy | batch | XLA | full loop ms per batch | bare step ms per batch | ratio |",
                  "|---|---|---:|---|---:|---:|---:|"]
        for device, o in overheads:
            ratio = f"{o['ratio']:.2f}" if o["ratio"] else f"{o['status']}: {o['reason']}"
            lines.append(f"| {device} | {o['policy']} | {o['batch']} | {'on' if o['jit'] else 'off'} "
                         f"| {_f(o['trainer_time_per_batch_ms'])} | {_f(o['bare_time_per_batch_ms'])} | {ratio} |")
        lines.append("")
    return "\n".join(lines)


def write_outputs(doc, output_dir):
    """benchmark.json, benchmark.csv, benchmark.md and the three figures, each written atomically."""
    from acgan.measure import plots
    from acgan.util.files import write_atomically

    output_dir = Path(output_dir)
    figures = plots.write_figures(doc, output_dir)
    write_atomically(output_dir / "benchmark.csv", render_csv(doc))
    write_atomically(output_dir / "benchmark.md", render_markdown(doc))
    # Last: a benchmark.json in a folder means the rest is there too.
    write_json(output_dir / "benchmark.json", dict(doc, figures=sorted(p.name for p in figures.values())))
    return output_dir

