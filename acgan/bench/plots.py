"""The benchmark's four figures: time per batch, time per 1000 samples, cost per million batches, and the
TFLOP/s achieved against the device's peak.

Drawn on matplotlib Figure objects with the Agg canvas: no pyplot, so no global figure state.
"""

import io
from operator import itemgetter
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from acgan.bench.results import groups
from acgan.measure.backend_labels import BACKEND_NAMES, backend_label, backend_of
from acgan.util.files import write_atomically

POLICY_COLORS = {"float32": "#1f77b4", "mixed_float16": "#ff7f0e", "mixed_bfloat16": "#2ca02c"}
DEVICE_MARKERS = ("o", "s", "^", "D", "v", "P", "X")
DEVICE_HATCHES = ("", "//", "..", "xx", "\\\\", "oo", "--")
DODGE = 0.04  # horizontal offset between series, in powers of two of the batch size
FIGURES = {
    "time_per_batch": "time_per_batch.png",
    "time_per_1000_samples": "time_per_1000_samples.png",
    "cost_per_million_batches": "cost_per_million_batches.png",
    "tflops": "tflops.png",
}


def series(rows):
    """{(device, backend label, policy, jit): ok rows sorted by batch}, in first-seen order. The backend
    label names the Keras backend (and on JAX the float32 matmul precision): backend_labels.backend_label."""
    ok = groups(
        [r for r in rows if r["status"] == "ok"],
        key=lambda r: (r["device"], backend_label(r), r["policy"], r["jit"]),
    )
    return {k: sorted(v, key=lambda r: r["batch"]) for k, v in ok.items()}


def series_label(key, many_devices, many_jits, many_backends):
    device, backend, policy, jit = key
    return ", ".join(
        ([device] if many_devices else [])
        + ([backend] if many_backends else [])
        + [policy]
        + ([f"XLA {'on' if jit else 'off'}"] if many_jits else [])
    )


def _styles(rows):
    """Two functions of a series key: its label, naming the device, backend label and XLA setting only where
    `rows` hold more than one, and the index of its (device, backend label) pair, which picks its marker
    (hatch)."""
    many = [
        len({value(r) for r in rows}) > 1
        for value in (itemgetter("device"), itemgetter("jit"), backend_label)
    ]
    pairs = list(dict.fromkeys((r["device"], backend_label(r)) for r in rows))
    return (lambda key: series_label(key, *many)), (lambda key: pairs.index(key[:2]))


def _line_style(key, pair):
    """A line's colour (its policy), marker (its device and backend) and dashes (XLA off)."""
    return {
        "color": POLICY_COLORS.get(key[2], "gray"),
        "marker": DEVICE_MARKERS[pair % len(DEVICE_MARKERS)],
        "linestyle": "-" if key[3] else "--",
    }


def _axes(width=8.0):
    fig = Figure(figsize=(width, 5.0), dpi=120)
    FigureCanvasAgg(fig)
    return fig.add_subplot()


def _finish(ax, path, labels, empty, ylabel, title):
    """The legend (with nothing drawn, `empty` in the middle), the y label and the title; saves the PNG and
    returns `labels`."""
    if labels:
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize="medium")
    buffer = io.BytesIO()
    ax.figure.savefig(buffer, format="png", bbox_inches="tight")
    write_atomically(path, buffer.getvalue())
    return labels


def _batch_axis(ax, series_points):
    batches = sorted({r["batch"] for points in series_points for r in points})
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.minorticks_off()
    ax.set_xlabel("batch size")
    ax.grid(True, which="major", alpha=0.3)


def _title(doc, what):
    devices = list(dict.fromkeys(run["device"] for run in doc["runs"]))
    title = (
        f"{what}: {', '.join(devices)}" if len(devices) <= 2 else f"{what}: {len(devices)} devices"
    )
    backends = list(
        dict.fromkeys(BACKEND_NAMES.get(backend_of(run), backend_of(run)) for run in doc["runs"])
    )
    return f"{title} ({' and '.join(backends)})"


def plot_lines(doc, path, field, ylabel, what, log_y=False):
    """One line per (device, backend, policy, XLA setting) against the batch size; returns the labels drawn."""
    label_of, pair_of = _styles(doc["results"])
    ax = _axes()
    drawn = series(doc["results"])
    for i, (key, points) in enumerate(drawn.items()):
        # side by side, so error bars do not hide each other
        dodge = 2 ** ((i - (len(drawn) - 1) / 2) * DODGE)
        values = [r[field] for r in points]
        # min/max follow the median
        scale = [v / r["time_per_batch_ms"] for v, r in zip(values, points)]
        low = [v - s * r["time_per_batch_min_ms"] for v, s, r in zip(values, scale, points)]
        high = [s * r["time_per_batch_max_ms"] - v for v, s, r in zip(values, scale, points)]
        ax.errorbar(
            [r["batch"] * dodge for r in points],
            values,
            yerr=[low, high],
            label=label_of(key),
            capsize=3,
            **_line_style(key, pair_of(key)),
        )
    if drawn:
        _batch_axis(ax, drawn.values())
        values = [r[field] for points in drawn.values() for r in points]
        if log_y and max(values) > 10 * min(values):  # a log axis only where a linear one squashes
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(NullFormatter())
    return _finish(
        ax,
        path,
        [label_of(key) for key in drawn],
        "no configuration ran successfully",
        ylabel,
        _title(doc, what) + "\n(median of repeated timings; bars: min to max)",
    )


def plot_cost(doc, path):
    """Grouped bars: per batch size, one bar per priced (device, policy, XLA setting); returns the labels."""
    label_of, pair_of = _styles(doc["results"])
    priced = {
        k: v
        for k, v in series(doc["results"]).items()
        if v and v[0]["cost_per_million_batches"] is not None
    }
    ax = _axes(9.0)
    batches = sorted({r["batch"] for points in priced.values() for r in points})
    width = 0.8 / max(1, len(priced))
    for i, (key, points) in enumerate(priced.items()):
        by_batch = {r["batch"]: r["cost_per_million_batches"] for r in points}
        xs = [
            j + (i - (len(priced) - 1) / 2) * width for j, b in enumerate(batches) if b in by_batch
        ]
        ys = [by_batch[b] for b in batches if b in by_batch]
        bars = ax.bar(
            xs,
            ys,
            width,
            label=label_of(key),
            color=POLICY_COLORS.get(key[2], "gray"),
            hatch=DEVICE_HATCHES[pair_of(key) % len(DEVICE_HATCHES)],
            alpha=1.0 if key[3] else 0.55,
            edgecolor="black",
            linewidth=0.5,
        )
        ax.bar_label(
            bars, labels=[f"${y:,.0f}" if y >= 10 else f"${y:,.2f}" for y in ys], fontsize="x-small"
        )
    notes = []
    for run in {
        r["device"]: r for r in doc["runs"]
    }.values():  # a price per device, not per backend
        price = run["price"]
        if price["usd_per_hour"] is None:
            notes.append(price["message"])
        else:
            entry = (
                f"{price['accelerator']}, {price['provider']} {price['kind']}"
                if price["accelerator"]
                else price["source"]
            )
            notes.append(f"{run['device']}: ${price['usd_per_hour']:g}/h ({entry})")
    if priced:
        ax.set_xticks(range(len(batches)), [str(b) for b in batches])
        ax.set_xlabel("batch size")
        ax.grid(True, axis="y", alpha=0.3)
    else:
        ax.set_xticks([])
        ax.set_yticks([])
    return _finish(
        ax,
        path,
        [label_of(key) for key in priced],
        "no price known: pass --price_per_hour",
        "USD per 10^6 batches",
        _title(doc, "Cost per million batches") + "\n" + "\n".join(notes),
    )


def plot_tflops(doc, path):
    """Achieved TFLOP/s against the batch size, one line per series, each labelled with its share of the
    device's peak at the largest batch; returns the labels drawn."""
    label_of, pair_of = _styles(doc["results"])
    ax = _axes()
    drawn = series([r for r in doc["results"] if r.get("tflops")])
    labels = []
    for key, points in drawn.items():
        last = points[-1]
        share = last.get("share_of_peak")
        labels.append(
            label_of(key)
            + (
                ""
                if share is None
                else f" ({share:.0%} of {last['peak_dtype']} peak at {last['batch']})"
            )
        )
        ax.plot(
            [r["batch"] for r in points],
            [r["tflops"] for r in points],
            label=labels[-1],
            **_line_style(key, pair_of(key)),
        )
    if drawn:
        _batch_axis(ax, drawn.values())
    return _finish(
        ax,
        path,
        labels,
        "no FLOPs counted",
        "TFLOP/s achieved",
        _title(doc, "Arithmetic throughput") + "\n(FLOPs of the step at the median time per batch)",
    )


def write_figures(doc, output_dir):
    """The four PNGs in `output_dir`; returns {figure name: path}."""
    paths = {name: Path(output_dir) / file for name, file in FIGURES.items()}
    plot_lines(
        doc,
        paths["time_per_batch"],
        "time_per_batch_ms",
        "ms per batch",
        "Time per batch",
        log_y=True,
    )
    plot_lines(
        doc,
        paths["time_per_1000_samples"],
        "time_per_1000_samples_ms",
        "ms per 1000 samples",
        "Time per 1000 samples",
    )
    plot_cost(doc, paths["cost_per_million_batches"])
    plot_tflops(doc, paths["tflops"])
    return paths
