"""acgan.compare's page: compare.md (one column per policy, the verdict, how the numbers were measured)
and compare.png (each policy's final sample grid, captioned)."""

import io

import numpy as np
from PIL import Image

from acgan.quality.report_section import prdc_text, span_text
from acgan.quality.verdict import PAIRED_MARGINS, mean_and_error, verdict
from acgan.util import markdown
from acgan.util.files import write_atomically
from acgan.util.markdown import na


def caption(row):
    ms = row["time_per_batch_median_ms"]
    if row["cost_per_million_batches"] is not None:
        cost = f"${row['cost_per_million_batches']:,.2f} per 10^6 batches"
    elif row["price_per_hour"] is None:
        cost = "cost: n/a (no --price_per_hour)"
    else:
        cost = "cost: n/a (too few steps to time)"
    class_fd = row.get("frechet_distance_class_mean")
    return "\n".join(
        [
            f"{'DIVERGED at ' if row.get('status') == 'diverged' else ''}{row['steps']:,} steps, "
            + (f"{ms:,.1f} ms/batch" if ms is not None else "too few steps to time"),
            cost,
            f"cond. acc. {row['conditional_accuracy']:.1%}, FD {row['frechet_distance']:.1f}"
            + (f", per class {class_fd:.1f}" if class_fd is not None else ""),
            *(
                [f"Inception FID {row['inception_fid']:.1f}"]
                if row["inception_fid"] is not None
                else []
            ),
        ]
    )


def write_figure(rows, path, title):
    """Each policy's final sample grid side by side, captioned with its speed, cost and quality."""
    import matplotlib  # here: only the process that draws the figure loads matplotlib (heavy)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(rows), figsize=(4.2 * len(rows), 5.4), squeeze=False)
    for ax, row in zip(axes[0], rows):
        try:
            grid = np.asarray(Image.open(row["grid"]))
            ax.imshow(
                grid,
                cmap="gray" if grid.ndim == 2 else None,
                vmin=0,
                vmax=255,
                interpolation="nearest",
            )
        except OSError:
            ax.text(0.5, 0.5, "no sample grid", ha="center", va="center")
        ax.set(xticks=[], yticks=[])
        ax.set_title(row["policy"], fontsize=12)
        ax.set_xlabel(caption(row), fontsize=9)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    write_atomically(path, buffer.getvalue())


def _reference_sizes(row):
    """The real-vs-real reference's sizes (every judged run has one: run_evaluation.evaluate_run)."""
    reference = row["real_reference"]
    return f"{reference['num_real']:,} real test images and {reference['num_train']:,} real train images"


def _seeds_text(s):
    seeds = s.get("seeds", 1)
    if seeds == 1:
        return f"seed {s['seed']}"
    return f"training seeds {s['seed']} to {s['seed'] + seeds - 1} (every run judged on the same generator inputs)"


def _alone_text(s, seeds):
    same = f"on the same data and seed{'s' if seeds > 1 else ''}; times exclude compilation and warm-up."
    parallel = s.get("parallel", 1)
    if parallel == 1:
        return f"Each policy trained alone, in its own process, {same}"
    steps = (
        " and, under a budget of minutes, the steps each reached"
        if s.get("minutes") is not None
        else ""
    )
    return (
        f"Runs trained {parallel} at a time, each in its own process, {same} Runs side by side share the "
        f"machine, so their times per batch, speed-ups and costs{steps} are shared-machine figures: compare "
        "speeds from runs trained alone (--parallel 1) or from acgan.benchmark."
    )


def _training_text(doc, seeds):
    """How the runs were trained: by this command (alone, or side by side), or, with --resume, some or all
    of them by an earlier command, whose conditions this page cannot know."""
    s = doc["settings"]
    reused = doc.get("reused_runs") or []
    runs = len(s["policies"]) * seeds
    earlier = (
        " trained by an earlier command in this folder (--resume), so the times are from each run's own "
        "training, beside whatever shared the machine then (compare speeds from acgan.benchmark)."
    )
    if reused and len(reused) == runs:
        return "Every run was" + earlier
    return _alone_text(s, seeds) + (
        f" The exception: {len(reused)} of the {runs} runs were{earlier}" if reused else ""
    )


def _generator_text(rows):
    """Which generator of each run was judged: G's moving average (G-EMA) or G's own weights."""
    averaged = sorted({r["ema_decay"] for r in rows if r.get("generator") == "ema"})
    if not averaged:
        return "on each run's generator itself (no moving average of its weights)"
    if all(r.get("generator") == "ema" for r in rows):
        return (
            f"on the moving average of each run's G (decay {', '.join(f'{d:g}' for d in averaged)})"
        )
    return "on the moving average of G where a run kept one, else on G itself"


def render_markdown(doc):
    rows, s = doc["rows"], doc["settings"]
    base = rows[0]["baseline"]
    device = doc["device"] or {}
    budget = f"{s['steps']:,} steps" if s["steps"] is not None else f"{s['minutes']:g} minutes"
    seeds = s.get("seeds", 1)
    seeded = seeds > 1 and all(r.get("across_seeds") for r in rows)
    sizes = f"{rows[0]['num_real']:,} real test images vs {rows[0]['num_generated']:,} generated"
    judge = doc["judge"] or {}
    price = f"${s['price_per_hour']}/h" if s["price_per_hour"] else "no --price_per_hour given"
    lines = [
        f"# Mixed precision compared: {s['dataset']}, batch {s['batch']}, width {s['width']:g}, {budget} each"
        + (f", {seeds} seeds" if seeds > 1 else "")
        + (f", {s['loss']} loss" if s.get("loss", "auto") != "auto" else ""),
        "",
        f"`{doc['command']}`",
        "",
        f"Device: {device.get('kind', '?')}: {device.get('name', '?')}. XLA {'on' if s['jit'] else 'off'}; "
        f"{_seeds_text(s)}; {price}. " + _training_text(doc, seeds),
        "",
        *(
            [
                f"Every number is the mean over the {seeds} training seeds' runs of each policy (the grids are seed "
                f"{s['seed']}'s; the other seeds' runs are in POLICY-seedN/); the rows \"at each seed\" pair each "
                f"seed's run with {base}'s at the same seed.",
                "",
            ]
            if seeded
            else []
        ),
        *markdown.table(
            ["", *(r["policy"] for r in rows)],
            [[name, *(cell(r) for r in rows)] for name, cell in table_lines(rows, seeds, seeded)],
        ),
        "",
        verdict(rows),
        "",
        f"Quality is judged by a float32 reference CNN trained on the real train split "
        f"({na(judge.get('test_accuracy'), '.2%')} on {judge.get('num_test') or 0:,} held-out test images; "
        f"never the GAN's own Q), {_generator_text(rows)}. Fréchet distance: {sizes} in the judge's 128-d penultimate features; "
        "compare it only between runs judged at the same sample sizes. The reference is the distance between "
        f"{_reference_sizes(rows[0])} in the same features: where a generator drawing the data exactly would land. "
        "The mean per-class distance averages each class's distance between its real test images and the samples "
        "generated for it (intra-class diversity: a class collapsed to one image scores high there even when the "
        "overall distance looks fine); its reference draws as many real train images per class as were generated. "
        "Precision and recall (Kynkäänniemi et al. 2019), density and coverage (Naeem et al. 2020), in the same "
        "features and at the same sizes, take fidelity and diversity apart: precision and density, how many "
        "samples lie among the real images' nearest neighbours; recall and coverage, how much of the real images "
        "the samples reach (a collapsed class keeps its precision and loses its recall and coverage). Read them "
        "against their real-vs-real references, which are below 1; they are shown, not ruled on.",
    ]
    notes = {
        r["inception_note"] for r in rows if r["inception_fid"] is None and r["inception_note"]
    }
    if notes:
        lines += ["", "Inception FID: " + "; ".join(sorted(notes)) + "."]
    lines += ["", "![final sample grids](compare.png)", ""]
    return "\n".join(lines)


def table_lines(rows, seeds, seeded):
    """The page's table as (line name, a row's cell) pairs, one column per policy: speed, cost, memory,
    then each quality number and its change against the baseline."""
    base = rows[0]["baseline"]
    return [
        ("status", lambda r: r.get("status", "completed")),
        ("steps reached", lambda r: f"{r['steps']:,}"),
        ("time per batch (median)", lambda r: na(r["time_per_batch_median_ms"], ",.1f", " ms")),
        ("time per batch (mean)", lambda r: na(r["time_per_batch_ms"], ",.1f", " ms")),
        (f"speed-up vs {base}", lambda r: na(r["speedup"], ".2f", "x")),
        ("time per 1000 samples", lambda r: na(r["time_per_1000_samples_ms"], ",.0f", " ms")),
        (
            "cost of 10^6 batches",
            lambda r: (
                "n/a"
                if r["cost_per_million_batches"] is None
                else f"${r['cost_per_million_batches']:,.2f}"
            ),
        ),
        ("compile time", lambda r: na(r["compile_seconds"], ".1f", " s")),
        (
            "peak memory",
            lambda r: na(r["peak_memory_bytes"] and r["peak_memory_bytes"] / 2**20, ",.0f", " MiB"),
        ),
        ("skipped (non-finite) updates", lambda r: f"{r['skipped_steps']:g}"),
        ("**conditional accuracy (judge)**", lambda r: f"**{r['conditional_accuracy']:.1%}**"),
        (f"change vs {base}", lambda r: f"{100 * r['accuracy_change']:+.1f} points"),
        *(_seed_lines(base, seeds) if seeded else []),
        *(_judge_lines(rows, base) if all(r.get("across_judges") for r in rows) else []),
        ("Fréchet distance, judge features", lambda r: f"{r['frechet_distance']:.2f}"),
        (
            f"change vs {base}",
            lambda r: na(r["frechet_change"] and 100 * r["frechet_change"], "+.0f", "%"),
        ),
        (
            "Fréchet distance, real vs real (reference)",
            lambda r: na((r.get("real_reference") or {}).get("frechet_distance"), ".2f"),
        ),
        (
            "mean per-class Fréchet distance",
            lambda r: na(r.get("frechet_distance_class_mean"), ".2f"),
        ),
        (
            f"change vs {base}",
            lambda r: na(
                r.get("class_frechet_change") and 100 * r["class_frechet_change"], "+.0f", "%"
            ),
        ),
        (
            "mean per-class, real vs real (reference)",
            lambda r: na((r.get("real_reference") or {}).get("frechet_distance_class_mean"), ".2f"),
        ),
        ("quality held", lambda r: "yes" if r["quality_held"] else "**no**"),
        *_prdc_lines(rows),
        ("classifier score", lambda r: f"{r['classifier_score']:.2f}"),
        ("Q's accuracy on real test images", lambda r: na(r["q_accuracy_real"], ".1%")),
        (
            "Q's accuracy on the generated samples",
            lambda r: na(r.get("q_accuracy_generated"), ".1%"),
        ),
        *(
            [
                (
                    "classification accuracy score (CAS)",
                    lambda r: na(r["classification_accuracy_score"], ".1%"),
                ),
                (
                    "CAS, real train images instead (reference)",
                    lambda r: na(r["classification_accuracy_score_real"], ".1%"),
                ),
            ]
            if all(r.get("classification_accuracy_score") is not None for r in rows)
            else []
        ),
        ("Inception FID", lambda r: na(r["inception_fid"], ".2f")),
        ("run", lambda r: f"[report]({r['report_md']})"),
    ]


def _prdc_lines(rows):
    """Precision / recall / density / coverage, overall and the mean per class, each with its real-vs-real
    reference (shown, not in the verdict); none when no row has them."""
    if all(r.get("precision") is None and r.get("precision_class_mean") is None for r in rows):
        return []
    k = next(r.get("prdc_nearest_k") for r in rows)
    return [
        (
            f"precision / recall / density / coverage (k-NN, k = {k})",
            lambda r: prdc_text(r) or "n/a",
        ),
        (
            "precision / recall / density / coverage, real vs real (reference)",
            lambda r: prdc_text(r.get("real_reference") or {}) or "n/a",
        ),
        (
            "mean per-class precision / recall / density / coverage",
            lambda r: prdc_text(r, "_class_mean") or "n/a",
        ),
        (
            "mean per-class, real vs real (reference)",
            lambda r: prdc_text(r.get("real_reference") or {}, "_class_mean") or "n/a",
        ),
    ]


def _seed_lines(base, seeds):
    """With several training seeds: each seed's accuracy, each seed's changes, and the paired summaries."""
    return [
        (
            f"accuracy at each of {seeds} seeds",
            lambda r: ", ".join(
                f"{x['conditional_accuracy']:.1%}" for x in r["across_seeds"]["runs"]
            ),
        ),
        (
            f"change vs {base} at each seed",
            lambda r: (
                ", ".join(
                    f"{100 * c:+.1f}" for c in r["conditional_accuracy_change_across_seeds"] or []
                )
                or "n/a"
            ),
        ),
        (
            f"distance / per-class distance change vs {base} at each seed",
            lambda r: (
                ", ".join(
                    f"{na(a and 100 * a, '+.0f', '%')} / {na(b and 100 * b, '+.0f', '%')}"
                    for a, b in zip(
                        r["frechet_distance_change_across_seeds"] or [],
                        r["frechet_distance_class_mean_change_across_seeds"] or [],
                    )
                )
                or "n/a"
            ),
        ),
        (
            f"accuracy / distance / per-class change vs {base} over the seed pairs (mean ± standard error)",
            lambda r: (
                "baseline"
                if r["policy"] == base
                else " / ".join(
                    mean_and_error(x, unit) if x else "n/a"
                    for x, unit in zip(
                        (r.get(f"{key}_change_paired") for key, _, _ in PAIRED_MARGINS),
                        (" points", "%", "%"),
                    )
                )
            ),
        ),
    ]


def _judge_lines(rows, base):
    """With several judges: the accuracy's span over the judges, and its change under each judge."""
    return [
        (
            f"accuracy across {len(rows[0]['across_judges']['judges'])} judges (min-max)",
            lambda r: span_text(r["across_judges"]["conditional_accuracy"], ".1%"),
        ),
        (
            f"change vs {base} under each judge",
            lambda r: (
                ", ".join(f"{100 * c:+.1f}" for c in r["accuracy_change_across_judges"] or [])
                or "n/a"
            ),
        ),
    ]
