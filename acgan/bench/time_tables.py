"""benchmark.md's sections on where a step's time goes: the arithmetic (FLOPs, TFLOP/s, share of the
device's peak), the profiles' groups of device time, and the trainer's overhead over the bare step
(G-EMA's cost among it). tables.py assembles the page."""

from pathlib import Path

from acgan.measure.backend_labels import backend_label
from acgan.measure.profile import GROUPS
from acgan.util import markdown


def render_overhead(runs):
    """The "Trainer overhead" section: the full training loop against the bare step, per backend's run."""
    overheads = [
        (run["device"], backend_label(run), run["overhead"]) for run in runs if run.get("overhead")
    ]
    if not overheads:
        return []
    cells = [
        [
            device,
            backend,
            o["policy"],
            o["batch"],
            "on" if o["jit"] else "off",
            o.get("trainer_log_every") or "n/a",
            markdown.na(o["trainer_time_per_batch_ms"]),
            markdown.na(o["bare_time_per_batch_ms"]),
            f"{o['ratio']:.2f}" if o["ratio"] else f"{o['status']}: {o['reason']}",
        ]
        for device, backend, o in overheads
    ]
    return (
        [
            "## Trainer overhead",
            "",
            "The full training loop (input pipeline: tf.data on TensorFlow, numpy batches prefetched to the "
            "device on JAX; metric reads, TensorBoard, progress bar) against the bare compiled step at the "
            "same configuration on the same backend: the median over the same number of windows of the "
            "same number of steps on both sides. The loop reads the metrics (a device sync) every "
            "`log_every` steps, so every window holds as many reads.",
            "",
        ]
        + markdown.table(
            [
                "device",
                "backend",
                "policy",
                "batch",
                "XLA",
                "log_every",
                "full loop ms per batch",
                "bare step ms per batch",
                "ratio",
            ],
            cells,
            align="lllrlrrrr",
        )
        + [""]
        + render_ema_cost(overheads)
    )


def render_ema_cost(overheads):
    """Lines on what G's moving average costs per step, at each overhead configuration."""
    lines = [
        f"- G-EMA on {device} ({backend}): {_ema_cost(o['ema'])}"
        for device, backend, o in overheads
        if o.get("ema")
    ]
    if not lines:
        return []
    return [
        "G's moving average is updated inside the step; each bare step above is timed with and without it:",
        "",
        *lines,
        "",
    ]


def _ema_cost(ema):
    if ema.get("status") != "ok":
        return f"not measured ({ema.get('reason')})"
    return (
        f"the bare step at decay {ema['decay']:g} takes {markdown.na(ema['with_ms'])} ms per batch, "
        f"{markdown.na(ema['without_ms'])} ms without the average ({ema['ratio']:.3f}x; one update of "
        "G's weights inside the step)"
    )


def render_arithmetic(rows):
    """The "FLOPs and share of peak" section: per configuration, the step's FLOPs per batch, the TFLOP/s
    achieved and the share of the device's peak for the policy's matrix dtype."""
    counted = [r for r in rows if r["status"] == "ok" and r.get("flops_per_batch")]
    if not counted:
        return []
    how = sorted({r["flops_counted_by"] for r in counted})
    cells = [
        [
            r["device"],
            backend_label(r),
            "on" if r["jit"] else "off",
            r["batch"],
            r["policy"],
            markdown.na(r["flops_per_batch"] / 1e9, ",.2f"),
            r["flops_counted_by"],
            markdown.na(r.get("tflops"), ",.2f"),
            f"{r['peak_tflops']:,.1f} ({r['peak_dtype']})"
            if r.get("peak_tflops")
            else f"unknown ({r['peak_dtype']})",
            f"{r['share_of_peak']:.1%}" if r.get("share_of_peak") is not None else "n/a",
        ]
        for r in counted
    ]
    return (
        [
            "## FLOPs and share of peak",
            "",
            "FLOPs of one step (D, G and Q, forward and backward) "
            + " and ".join(
                {
                    "xla": "from XLA's cost analysis of the compiled step",
                    "layers": "counted from the layers' matrix products and convolutions",
                }[h]
                for h in how
            )
            + "; TFLOP/s at the median time per batch; the peak is the device's dense peak for the dtype "
            "its matrix products run in (acgan/measure/device_peaks.json; docs/benchmark.md#flops-and-share-of-peak).",
            "",
        ]
        + markdown.table(
            [
                "device",
                "backend",
                "XLA",
                "batch",
                "policy",
                "GFLOP per batch",
                "counted",
                "TFLOP/s",
                "peak TFLOP/s",
                "share of peak",
            ],
            cells,
            align="lllrlrlrrr",
        )
        + [""]
    )


def render_profiles(rows):
    """With --profile: per configuration, the device time per step and its groups (measure.profile)."""
    failed = [r for r in rows if r["status"] == "ok" and (r.get("profile") or {}).get("error")]
    profiled = [r for r in rows if r["status"] == "ok" and r.get("profile") and r not in failed]
    if not profiled and not failed:
        return []
    shown = [g for g in GROUPS if any(r["profile"]["groups"].get(g) for r in profiled)]
    cells = []
    for r in profiled:
        p = r["profile"]
        total = p["device_ms_per_step"]
        shares = [_ms_and_share(p["groups"].get(g) or 0.0, total) for g in shown]
        cells.append(
            [
                r["device"],
                backend_label(r),
                "on" if r["jit"] else "off",
                r["batch"],
                r["policy"],
                f"{total:,.2f}",
                *shares,
                f"`{Path(p['dir']).name}`",
            ]
        )
    lines = [
        "## Where the device time goes",
        "",
        "From a profiler trace of a few more steps of each configuration, after its timings "
        "(milliseconds of device time per step; on a CPU summed over its threads). Each configuration's "
        "folder holds the trace and profile.md, its top operations.",
        "",
    ]
    lines += markdown.table(
        ["device", "backend", "XLA", "batch", "policy", "device ms per step", *shown, "folder"],
        cells,
        align="lllrlr" + "r" * len(shown) + "l",
    )
    lines += [
        f"- {r['device']}, {r['policy']}, batch {r['batch']}: no profile ({r['profile']['error']})"
        for r in failed
    ]
    return lines + [""]


def _ms_and_share(ms, total):
    return f"{ms:,.2f} ({ms / total if total else 0.0:.0%})"
