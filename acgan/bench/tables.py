"""Benchmark results as files: benchmark.md (its markdown tables), benchmark.csv, and write_outputs, which
writes them with the figures (plots) and benchmark.json."""

import csv
import io

from acgan.bench.results import backend_comparison, groups
from acgan.bench.time_tables import render_arithmetic, render_overhead, render_profiles
from acgan.config import POLICIES
from acgan.measure import prices
from acgan.measure.backend_labels import backend_label, backend_of, describe_backend, precision_of
from acgan.util import markdown
from acgan.util.files import write_atomically, write_json

BUSY_LOAD = 1.5  # load average per core above which the report warns that others shared the CPU


def describe_machine(label, machine):
    if machine.get("kind") == "GPU":
        what = f"GPU {machine.get('name')} (compute capability {machine.get('compute_capability')})"
    elif machine.get("kind") == "TPU":
        what = (
            f"{machine.get('name')}: {machine.get('count')} chip(s), {machine.get('tpu_cores')} TensorFlow "
            f"TPU device(s); host CPU {machine.get('cpu_model')}"
        )
    else:
        flags = ", ".join(machine.get("cpu_flags") or []) or "none of interest"
        what = f"CPU {machine.get('cpu_model')} ({machine.get('cpu_cores')} cores; flags: {flags})"
    named = f"{label}: " if label != machine.get("name") else ""
    versions = (
        f"JAX {machine.get('jax')} (matmul precision {machine.get('jax_matmul_precision') or 'default'})"
        if machine.get("backend") == "jax"
        else f"TensorFlow {machine.get('tensorflow')}"
    )
    return f"{named}{what}; {versions}, Keras {machine.get('keras')}"


def _priced(row, replicas):
    """What a table price was paid for: chips on a TPU (replicas are TensorCores there), else devices."""
    count, unit = prices.accelerators(replicas, row.get("machine"))
    return f"{count} TPU chip(s)" if unit == "chip" else f"{replicas} devices"


CSV_COLUMNS = (
    "device",
    "kind",
    "accelerator",
    "compute_capability",
    "cpu_model",
    "cpu_flags",
    "cpu_cores",
    "backend",
    "matmul_precision",
    "tensorflow",
    "jax",
    "keras",
    "policy",
    "jit",
    "batch",
    "status",
    "reason",
    "compile_seconds",
    "time_per_batch_ms",
    "time_per_batch_min_ms",
    "time_per_batch_max_ms",
    "time_per_1000_samples_ms",
    "samples_per_second",
    "replicas",
    "samples_per_second_per_replica",
    "speedup_vs_float32",
    "peak_memory_bytes",
    "memory_counter",
    "load_average",
    "d_skipped",
    "g_skipped",
    "q_skipped",
    "price_per_hour",
    "price_entry",
    "cost_per_million_batches",
    "flops_per_batch",
    "flops_counted_by",
    "tflops",
    "peak_tflops",
    "peak_dtype",
    "share_of_peak",
    "command",
)


def render_csv(doc):
    """The results flattened to CSV_COLUMNS (machine fields and skipped steps spread out)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in doc["results"]:
        m, skipped = r.get("machine") or {}, r.get("skipped_steps") or {}
        flat = dict(
            r,
            kind=m.get("kind"),
            accelerator=m.get("name"),
            compute_capability=m.get("compute_capability"),
            cpu_model=m.get("cpu_model"),
            cpu_flags=" ".join(m.get("cpu_flags") or []),
            cpu_cores=m.get("cpu_cores"),
            tensorflow=m.get("tensorflow"),
            jax=m.get("jax"),
            keras=m.get("keras"),
            backend=backend_of(r),
            matmul_precision=precision_of(r),
            d_skipped=skipped.get("d"),
            g_skipped=skipped.get("g"),
            q_skipped=skipped.get("q"),
        )
        # repr keeps every float exact, so the CSV holds the JSON's numbers.
        writer.writerow(
            "" if v is None else repr(v) if isinstance(v, float) else v
            for v in map(flat.get, CSV_COLUMNS)
        )
    return buffer.getvalue()


def _group_title(device, backend, jit):
    return f"{device}, {backend}, XLA {'on' if jit else 'off'}"


def render_markdown(doc):
    runs, rows = doc["runs"], doc["results"]
    lines = ["# Mixed-precision benchmark", ""]
    if doc.get("command"):
        lines += [f"Command: `{doc['command']}`", ""]
    lines += ["## Devices", ""]
    for run in runs:
        lines += render_device(run, rows)
    for section in (
        render_speedups,
        render_backends,
        render_results,
        render_arithmetic,
        render_profiles,
    ):
        lines += section(rows)
    return "\n".join(lines + render_overhead(runs))


def render_device(run, rows):
    """One backend's run on one device: the machine, the timing protocol, the price, the load, the advice."""
    s = run["settings"]
    source = "synthetic uint8 tensors" if s.get("synthetic") else f"dataset {s.get('dataset')}"
    lines = [
        f"### {run['device']}, {backend_label(run)}",
        "",
        f"- machine: {describe_machine(run['device'], run['machine'])}",
        f"- backend: {describe_backend(run)}"
        + (
            " (float32 matrix products may run in TF32 on a GPU that has it; JAX_DEFAULT_MATMUL_PRECISION=highest "
            "keeps them float32)"
            if precision_of(run) == "default"
            else ""
        ),
        f"- command: `{run.get('command')}`"
        + (f" (from {run['source']})" if run.get("source") else ""),
        f"- timing: bare compiled step on device-resident {source} "
        f"({'x'.join(map(str, run['inputs']['image_shape']))}, {run['inputs']['num_classes']} classes), "
        f"width {s['width']}; {s['repeats']} timings of {s['steps']} steps each after the compile step "
        f"and {s['warmup']} warm-up step{'' if s['warmup'] == 1 else 's'}, each timing ending on a device sync; median [min-max] shown",
        f"- price: {run['price']['description']}",
    ]
    if backend_of(run) == "jax" and s.get("jax_conv_transpose"):
        lines.insert(
            -1,
            f"- JAX formulations: transposed convolutions {s['jax_conv_transpose']}, batch norm "
            f"{s['jax_batch_norm']} (--jax_conv_transpose, --jax_batch_norm)",
        )
    loads = [
        r["load_average"]
        for r in rows
        if r["device"] == run["device"]
        and backend_label(r) == backend_label(run)
        and r.get("load_average") is not None
    ]
    cores = run["machine"].get("cpu_cores") or 1
    if loads:
        lines.append(
            f"- load: the 1-minute load average after the timings reached {max(loads):.1f} on {cores} cores"
            + (
                " — **other processes competed for the CPU: these timings are inflated and noisy**"
                if max(loads) > BUSY_LOAD * cores
                else ""
            )
        )
    if run["price"].get("alternatives"):
        lines.append(
            f"- other entries for {run['price']['accelerator']}: {'; '.join(run['price']['alternatives'])}"
        )
    lines += [
        f"- advice ({policy}): {line}"
        for policy, advice in (run.get("advice") or {}).items()
        for line in advice
    ]
    return lines + [""]


def render_speedups(rows):
    """The "Speed-up over float32" section: per device, backend and XLA setting, batch x mixed policy."""
    mixed = [p for p in POLICIES[1:] if any(r["policy"] == p for r in rows)]
    if not mixed or not any(r["policy"] == "float32" for r in rows):
        return []
    lines = [
        "## Speed-up over float32",
        "",
        "Time per batch under float32 divided by time per batch under the mixed policy "
        "(above 1: mixed precision is faster).",
        "",
    ]
    for (device, backend, jit), group in groups(rows).items():
        if not any(
            r["policy"] in mixed for r in group
        ):  # e.g. float32 alone at another matmul precision
            continue
        cells = []
        for b in sorted({r["batch"] for r in group}):
            found = [
                next((r for r in group if r["batch"] == b and r["policy"] == p), None)
                for p in mixed
            ]
            cells.append(
                [b]
                + [
                    "—"
                    if r is None
                    else f"{r['speedup_vs_float32']:.2f}×"
                    if r["speedup_vs_float32"]
                    else r["status"]
                    if r["status"] != "ok"
                    else "n/a"
                    for r in found
                ]
            )
        table = markdown.table(["batch", *mixed], cells, align="r" * (1 + len(mixed)))
        lines += [f"### {_group_title(device, backend, jit)}", "", *table, ""]
    return lines


def render_backends(rows):
    """The "Backends side by side" section, where one configuration ran on more than one backend."""
    compared = backend_comparison(rows)
    if not compared:
        return []
    names = list(dict.fromkeys(b for *_, times in compared for b in times))
    cells = []
    for device, jit, policy, batch, times in compared:
        others = [t for b, t in times.items() if b != names[0]]
        ratio = f"{times[names[0]] / min(others):.2f}" if names[0] in times and others else "—"
        cells.append(
            [
                device,
                "on" if jit else "off",
                policy,
                batch,
                *(markdown.na(times.get(b)) if b in times else "—" for b in names),
                min(times, key=times.get),  # the fastest
                ratio,
            ]
        )
    return (
        [
            "## Backends side by side",
            "",
            "Milliseconds per batch of the same configuration on each backend (bare compiled step). "
            f"Ratio: ms on {names[0]} / ms on the fastest other; below 1, {names[0]} is faster.",
            "",
        ]
        + markdown.table(
            ["device", "XLA", "policy", "batch", *names, "fastest", "ratio"],
            cells,
            align="lllr" + "r" * len(names) + "lr",
        )
        + [""]
    )


RESULT_COLUMNS = (
    "batch",
    "policy",
    "ms per batch",
    "ms per 1000 samples",
    "samples/s",
    "speed-up",
    "compile s",
    "peak memory MiB",
    "skipped d/g/q",
    "$ per 10^6 batches",
)


def render_results(rows):
    """The "Results" section: per device, backend and XLA setting, every configuration's measurement."""
    lines = ["## Results", ""]
    for (device, backend, jit), group in groups(rows).items():
        ordered = sorted(
            group,
            key=lambda r: (
                r["batch"],
                POLICIES.index(r["policy"]) if r["policy"] in POLICIES else 9,
            ),
        )
        lines += [f"### {_group_title(device, backend, jit)}", ""] + markdown.table(
            RESULT_COLUMNS, [_result_cells(r) for r in ordered], align="rlrrrrrrrr"
        )
        replicas = max(r.get("replicas") or 1 for r in group)
        if replicas > 1:
            modes = ", ".join(sorted({r["xla"] for r in group if r.get("xla")})) or "n/a"
            lines += [
                "",
                f"{replicas} replicas: batch and samples/s are global (per replica: divide by "
                f"{replicas}); the price is that of all {_priced(group[0], replicas)}. XLA as run: {modes}.",
            ]
        counters = {r.get("memory_counter") for r in group if r.get("memory_counter")}
        if counters:
            lines += ["", f"Peak memory: {'; '.join(sorted(counters))}."]
        lines.append("")
    return lines


def _result_cells(r):
    """One configuration's cells of the results table (a failed one: its status and reason)."""
    if r["status"] != "ok":
        return [r["batch"], r["policy"], f"**{r['status']}**: {r['reason']}"] + [""] * 7
    skipped = r.get("skipped_steps") or {}
    memory = r.get("peak_memory_bytes")
    return [
        r["batch"],
        r["policy"],
        f"{markdown.na(r['time_per_batch_ms'])} [{markdown.na(r['time_per_batch_min_ms'])}-{markdown.na(r['time_per_batch_max_ms'])}]",
        markdown.na(r["time_per_1000_samples_ms"]),
        markdown.na(r["samples_per_second"], ",.0f"),
        markdown.na(r["speedup_vs_float32"], ",.2f", "×") if r["speedup_vs_float32"] else "—",
        markdown.na(r["compile_seconds"]),
        markdown.na(memory / 2**20 if memory else None, ",.0f"),
        "/".join(str(skipped.get(k, "?")) for k in "dgq"),
        markdown.na(r["cost_per_million_batches"], ",.2f")
        if r["cost_per_million_batches"] is not None
        else "no price",
    ]


def write_outputs(doc, output_dir):
    """benchmark.json, benchmark.csv, benchmark.md and the figures in the folder `output_dir` (a Path: its
    callers' prepared folder), each written atomically."""
    # Here, not at the top: acgan.api imports this module, so every command (and each run acgan.compare
    # trains) would load matplotlib, about a second (1.2 s against 0.44 s for all of acgan.api, on 2 CPU
    # cores), to draw nothing; only the benchmark's processes draw the figures.
    from acgan.bench import plots

    figures = plots.write_figures(doc, output_dir)
    write_atomically(output_dir / "benchmark.csv", render_csv(doc))
    write_atomically(output_dir / "benchmark.md", render_markdown(doc))
    # Last: a benchmark.json in a folder means the rest is there too.
    write_json(
        output_dir / "benchmark.json", dict(doc, figures=sorted(p.name for p in figures.values()))
    )
