"""Timing and cost figures (pure functions) and the run report (report.json + report.md)."""
import statistics

from acgan.files import write_atomically, write_json

SECONDS_PER_HOUR = 3600.0


def cost_per_million_batches(seconds_per_batch, price_per_hour):
    """USD to run 10^6 batches at `seconds_per_batch` on a machine costing `price_per_hour` USD/h."""
    return seconds_per_batch * 1e6 / SECONDS_PER_HOUR * price_per_hour


def timing_summary(step_seconds, batch):
    """Figures from per-step wall times (each ending on a device sync), warm-up already removed."""
    if not step_seconds:
        return {"measured_steps": 0}
    mean = statistics.fmean(step_seconds)
    return {
        "measured_steps": len(step_seconds),
        "time_per_batch_ms": mean * 1e3,
        "time_per_batch_median_ms": statistics.median(step_seconds) * 1e3,
        "time_per_batch_min_ms": min(step_seconds) * 1e3,
        "time_per_batch_max_ms": max(step_seconds) * 1e3,
        "time_per_1000_samples_ms": mean * 1e3 * 1000.0 / batch,
        "samples_per_second": batch / mean,
    }


def cost_summary(time_per_batch_ms, price_per_hour):
    if price_per_hour is None or time_per_batch_ms is None:
        return {"price_per_hour": None, "cost_per_million_batches": None}
    return {
        "price_per_hour": price_per_hour,
        "cost_per_million_batches": cost_per_million_batches(time_per_batch_ms / 1e3, price_per_hour),
    }


def _fmt(value, unit="", digits=1):
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}{unit}"


def render_markdown(report):
    device = report["device"]
    accelerator = device["name"]
    if device.get("compute_capability"):
        accelerator += f" (compute capability {device['compute_capability']})"
    timing, cost = report["timing"], report["cost"]
    if cost["cost_per_million_batches"] is None:
        cost_line = "n/a (no --price_per_hour given)"
    else:
        cost_line = f"${cost['cost_per_million_batches']:,.2f} at ${cost['price_per_hour']}/h"
    rows = [
        ("device", f"{device['kind']}: {accelerator}"),
        ("policy", report["policy"]),
        ("XLA", "on" if report["jit"] else "off"),
        ("batch", report["batch"]),
        ("steps", report["steps"]),
        ("compile time", _fmt(report["compile_seconds"], " s", 2)),
        ("time per batch (mean)", _fmt(timing.get("time_per_batch_ms"), " ms", 2)),
        ("time per batch (median)", _fmt(timing.get("time_per_batch_median_ms"), " ms", 2)),
        ("time per 1000 samples", _fmt(timing.get("time_per_1000_samples_ms"), " ms", 1)),
        ("samples per second", _fmt(timing.get("samples_per_second"), "", 1)),
        ("measured steps", f"{timing.get('measured_steps', 0)} (compile step and {report['warmup_steps']} warm-up steps excluded)"),
        ("peak memory", _fmt(report["peak_memory_bytes"] / 2**20, " MiB", 1)),
        ("cost of 10^6 batches", cost_line),
        ("wall time", _fmt(report["wall_seconds"], " s", 1)),
    ]
    lines = [f"# Run report: {report['run_dir']}", "", f"`{report['command']}`", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    if report.get("final_metrics"):
        lines += ["", "Final metrics:", "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v:.4g} |" for k, v in report["final_metrics"].items()]
    return "\n".join(lines) + "\n"


def write_report(run_dir, report):
    write_json(run_dir / "report.json", report)
    write_atomically(run_dir / "report.md", render_markdown(report))
