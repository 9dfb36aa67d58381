"""acgan.compare's statistics, pure of files and training: a policy's row over several training seeds,
the changes against the baseline (float32), the seeds' paired changes against each margin, and the
verdict paragraph."""

import math

import numpy as np

from acgan.quality import prdc

QUALITY_TOLERANCE = 0.03  # conditional accuracy may trail the baseline by at most 3 points
# The Fréchet distance (judge features) may exceed the baseline's by at most FD_RELATIVE_TOLERANCE of it,
# or by FD_REFERENCE_MULTIPLE real-vs-real reference distances where that is more (a baseline close to the
# data, whose distance is mostly finite-sample noise). 15% is about ten times what evaluation noise and a
# rerun of the same command move the distance, and half the gap mixed_float16 showed on doodles
# (docs/quality.md). Seed-to-seed training spread can be larger (GANs): `--seeds N` rules on the means over
# N training seeds.
FD_RELATIVE_TOLERANCE = 0.15
FD_REFERENCE_MULTIPLE = 3.0


# Precision, recall, density and coverage (acgan.quality.prdc), overall and their means over the classes,
# with the k they were measured at: on the page beside their real-vs-real references, not in the verdict.
PRDC_KEYS = (*prdc.MEANS, "prdc_nearest_k")
# A policy's row over several training seeds: these are averaged; the run folder, grid, judge and
# references stay the first seed's (the references depend on the judge and the sample sizes, not the run).
MEAN_OVER_SEEDS = (
    "steps",
    "loop_seconds",
    "compile_seconds",
    "time_per_batch_ms",
    "time_per_batch_median_ms",
    "time_per_1000_samples_ms",
    "cost_per_million_batches",
    "peak_memory_bytes",
    "conditional_accuracy",
    "frechet_distance",
    "frechet_distance_class_mean",
    "classifier_score",
    "q_accuracy_real",
    "q_accuracy_generated",
    "inception_fid",
    "classification_accuracy_score",
    "classification_accuracy_score_real",
    *prdc.MEANS,
)
PER_SEED = (
    "seed",
    "steps",
    "run_dir",
    "status",
    "time_per_batch_median_ms",
    "conditional_accuracy",
    "frechet_distance",
    "frechet_distance_class_mean",
)


# What --judges N reports the spread of, over the judges (evaluation.across_judges) and over seeds here.
ACROSS_JUDGES = ("conditional_accuracy", "frechet_distance", "frechet_distance_class_mean")


def spread(values):
    """min / max / mean of the values that are not None (None when none is)."""
    values = [v for v in values if v is not None]
    return (
        {"min": min(values), "max": max(values), "mean": float(np.mean(values))} if values else None
    )


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _relative(a, b):
    """a's change against b as a fraction (None where either is missing or b is 0)."""
    return None if a is None or not b else a / b - 1.0


def _means(dicts, keys=None):
    """Each key's mean over the dicts (_mean's); keys: the first dict's."""
    return {key: _mean([d.get(key) for d in dicts]) for key in keys or dicts[0]}


def combine_seeds(runs):
    """One policy's row from its runs at several training seeds (a single run is returned as it is): the
    means of MEAN_OVER_SEEDS, skipped updates summed, the per-class distances and, with several judges,
    each judge's numbers averaged over the seeds; each seed's own numbers in row["across_seeds"]."""
    if len(runs) == 1:
        return runs[0]
    row = dict(
        runs[0], **_means(runs, MEAN_OVER_SEEDS)
    )  # None where no run has it (CAS without --cas)
    row["steps"] = round(row["steps"])
    row["skipped_steps"] = sum(r["skipped_steps"] for r in runs)
    row["status"] = next((r["status"] for r in runs if r["status"] != "completed"), "completed")
    if all(r.get("frechet_distance_per_class") for r in runs):
        row["frechet_distance_per_class"] = _means([r["frechet_distance_per_class"] for r in runs])
    if all(r.get("across_judges") for r in runs):
        judges = []
        for j, first in enumerate(runs[0]["across_judges"]["judges"]):
            each = [r["across_judges"]["judges"][j] for r in runs]  # judge j at every seed
            per_class = _means([x["conditional_accuracy_per_class"] for x in each])
            judges.append(
                dict(first, **_means(each, ACROSS_JUDGES), conditional_accuracy_per_class=per_class)
            )
        row["across_judges"] = {
            "judges": judges,
            **{key: spread([j[key] for j in judges]) for key in ACROSS_JUDGES},
        }
    row["across_seeds"] = {
        "runs": [{k: r.get(k) for k in PER_SEED} for r in runs],
        **{key: spread([r[key] for r in runs]) for key in ACROSS_JUDGES},
    }
    return row


def frechet_limit(base_distance, reference_distance=None):
    """The largest Fréchet distance that still counts as held against a baseline's."""
    limit = base_distance * (1.0 + FD_RELATIVE_TOLERANCE)
    return (
        limit
        if reference_distance is None
        else max(limit, base_distance + FD_REFERENCE_MULTIPLE * reference_distance)
    )


def add_baseline(rows):
    """Speed-up, conditional-accuracy and Fréchet-distance change against float32 (or the first policy
    without it), and the verdict: quality held when the accuracy, the overall distance and (where both
    runs have it) the mean per-class distance held, each distance by the same rule against its own
    real-vs-real reference."""
    base = next((r for r in rows if r["policy"] == "float32"), rows[0])
    reference = base.get("real_reference") or {}
    # Each distance's name in a row (frechet_*, class_frechet_*), its key, and the baseline's limit.
    distances = [
        (
            name,
            key,
            None if base.get(key) is None else frechet_limit(base[key], reference.get(key)),
        )
        for name, key in (
            ("frechet", "frechet_distance"),
            ("class_frechet", "frechet_distance_class_mean"),
        )
    ]
    for r in rows:
        r["baseline"] = base["policy"]
        t, bt = r["time_per_batch_median_ms"], base["time_per_batch_median_ms"]
        r["speedup"] = bt / t if t and bt else None
        r["accuracy_change"] = r["conditional_accuracy"] - base["conditional_accuracy"]
        r["accuracy_held"] = r["accuracy_change"] >= -QUALITY_TOLERANCE
        for name, key, limit in distances:
            value = r.get(key)
            r[f"{name}_change"] = _relative(value, base.get(key))
            r[f"{name}_limit"] = limit
            r[f"{name}_held"] = None if value is None or limit is None else value <= limit
        r["quality_held"] = (
            r["accuracy_held"] and r["frechet_held"] and r["class_frechet_held"] is not False
        )
        # With several judges: the accuracy change under each judge (the same judge on both sides), so a
        # reader sees whether a verdict near the margin would survive another judge.
        judges, base_judges = ((x.get("across_judges") or {}).get("judges") for x in (r, base))
        r["accuracy_change_across_judges"] = (
            [
                a["conditional_accuracy"] - b["conditional_accuracy"]
                for a, b in zip(judges, base_judges)
            ]
            if judges and base_judges and len(judges) == len(base_judges)
            else None
        )
        # With several training seeds: the change at each seed (the same seed on both sides), and the
        # distances' changes likewise, so a reader sees how far one pair of runs could have misled.
        seeds, base_seeds = ((x.get("across_seeds") or {}).get("runs") for x in (r, base))
        paired = (
            seeds and base_seeds and [a["seed"] for a in seeds] == [b["seed"] for b in base_seeds]
        )
        # The seeds' paired changes also as a mean and its standard error, placed against each margin,
        # so a reader sees whether this many seeds can decide the verdict at all.
        for (key, margin, held_above), change in zip(
            PAIRED_MARGINS, (lambda a, b: a - b, _relative, _relative)
        ):
            r[f"{key}_change_across_seeds"] = (
                [change(a[key], b[key]) for a, b in zip(seeds, base_seeds)] if paired else None
            )
            r[f"{key}_change_paired"] = paired_summary(
                r[f"{key}_change_across_seeds"], margin, held_above
            )


# Each criterion's per-seed change, its margin, and whether a change above the margin holds: accuracy may
# fall at most 3 points; a distance may grow at most 15% (the rule's relative part: the reference part
# matters only for a baseline almost at the data).
PAIRED_MARGINS = (
    ("conditional_accuracy", -QUALITY_TOLERANCE, True),
    ("frechet_distance", FD_RELATIVE_TOLERANCE, False),
    ("frechet_distance_class_mean", FD_RELATIVE_TOLERANCE, False),
)
DECIDED_AT = (
    2.0  # standard errors between the mean paired change and a margin for the seeds to decide it
)


def paired_summary(changes, margin, held_above):
    """Several seeds' paired changes (a policy's run minus the baseline's at the same seed) against a
    margin: their mean, the mean's standard error (sample standard deviation / sqrt(pairs)), how many
    standard errors the mean lies on the held side of the margin (negative: the failing side; None
    without spread), and about how many pairs would put DECIDED_AT standard errors between the mean and
    the margin if the mean and spread stayed as they are. None for fewer than two pairs."""
    if not changes or len(changes) < 2 or any(c is None for c in changes):
        return None
    n = len(changes)
    mean = sum(changes) / n
    sd = math.sqrt(sum((c - mean) ** 2 for c in changes) / (n - 1))
    gap = (mean - margin) if held_above else (margin - mean)
    se = sd / math.sqrt(n)
    return {
        "pairs": n,
        "mean": mean,
        "standard_error": se,
        "margin": margin,
        "held_side_in_standard_errors": gap / se if se else None,
        "pairs_to_decide": math.ceil((DECIDED_AT * sd / gap) ** 2) if se and gap else None,
    }


# Each criterion a row can fail (its test), and how the verdict names the failure.
FAILURES = (
    (
        lambda r: not r["accuracy_held"],
        lambda r: f"conditional accuracy {100 * r['accuracy_change']:+.1f} points",
    ),
    (
        lambda r: not r["frechet_held"],
        lambda r: (
            f"Fréchet distance {r['frechet_distance']:.2f} ({100 * r['frechet_change']:+.0f}%)"
        ),
    ),
    (
        lambda r: r.get("class_frechet_held") is False,
        lambda r: (
            f"mean per-class Fréchet distance {r['frechet_distance_class_mean']:.2f} "
            f"({100 * r['class_frechet_change']:+.0f}%, limit {r['class_frechet_limit']:.2f})"
        ),
    ),
)


def verdict(rows):
    """One paragraph: did quality hold for every policy, and if not, which criterion failed where."""
    base = next(r for r in rows if r["policy"] == r["baseline"])
    reference = (base.get("real_reference") or {}).get("frechet_distance")
    rule = (
        f"conditional accuracy at most {100 * QUALITY_TOLERANCE:.0f} points below {base['policy']}'s, and "
        f"Fréchet distance at most {rows[0]['frechet_limit']:.2f} = the larger of {base['policy']}'s "
        f"{base['frechet_distance']:.2f} + {FD_RELATIVE_TOLERANCE:.0%}"
        + (
            f" and {base['policy']}'s + {FD_REFERENCE_MULTIPLE:g} x the real-vs-real reference "
            f"{reference:.2f}"
            if reference is not None
            else " (no real-vs-real reference measured)"
        )
        + (
            f"; and the mean per-class Fréchet distance likewise, at most {base['class_frechet_limit']:.2f} "
            f"against {base['policy']}'s {base['frechet_distance_class_mean']:.2f}"
            if base.get("class_frechet_limit") is not None
            else ""
        )
    )
    missed = []
    for r in rows:
        why = [text(r) for failed, text in FAILURES if failed(r)]
        if why:
            missed.append(f"{r['policy']} ({', '.join(why)})")
    others = [r for r in rows if r is not base]
    seeds = _accuracy_changes_text(
        others, "conditional_accuracy_change_across_seeds", "at", "seeds"
    )
    judges = _accuracy_changes_text(others, "accuracy_change_across_judges", "under", "judges")
    n_seeds = seeds and len(others[0]["conditional_accuracy_change_across_seeds"])
    spread = (
        (
            f" The verdict is on the means over {n_seeds} training seeds; seed by seed (each against {base['policy']} "
            f"at the same seed): {seeds}."
            if seeds
            else ""
        )
        + _paired_text(others, base["policy"])
        + (
            f" Judged again by judges of other seeds (the verdict is judge 0's): {judges}."
            if judges
            else ""
        )
    )
    if missed:
        return f"Quality did not hold for {'; '.join(missed)}. Held means: {rule}.{spread}"
    return f"Quality held for every policy: {rule}.{spread}"


def mean_and_error(summary, unit):
    """ "-2.7 ± 4.5 points" or "+35% ± 16%": a paired summary's mean and standard error."""
    digits = 1 if unit == " points" else 0
    return (
        f"{100 * summary['mean']:+.{digits}f} ± {100 * summary['standard_error']:.{digits}f}{unit}"
    )


def _paired_change_text(summary, what, unit):
    """ "accuracy -2.7 ± 4.5 points, 0.1 standard errors on the held side of -3": one criterion's paired
    summary (paired_summary), in points or percent."""
    z = summary["held_side_in_standard_errors"]
    margin = f"{100 * summary['margin']:+.0f}{unit}"
    where = (
        "no spread between the seeds"
        if z is None
        else f"{abs(z):.1f} standard errors on the {'held' if z >= 0 else 'failing'} side of {margin}"
    )
    return f"{what} {mean_and_error(summary, unit)}, {where}"


def _paired_text(rows, base):
    """The paired summaries of every policy's criteria, and which of them these seeds cannot decide
    ('' with one seed)."""
    parts, open_, pairs = [], [], None
    for r in rows:
        summaries = [
            (r.get(f"{key}_change_paired"), what, unit)
            for (key, _, _), what, unit in zip(
                PAIRED_MARGINS,
                ("accuracy", "distance", "per-class distance"),
                (" points", "%", "%"),
            )
        ]
        if not summaries[0][0]:
            continue
        pairs = summaries[0][0]["pairs"]
        parts.append(
            f"{r['policy']}'s " + "; ".join(_paired_change_text(*x) for x in summaries if x[0])
        )
        for summary, what, _ in summaries:
            z = summary and summary["held_side_in_standard_errors"]
            if z is not None and abs(z) < DECIDED_AT:
                needed = summary["pairs_to_decide"]
                needs = f" (about {needed:,} pairs at this spread)" if needed else ""
                open_.append(f"{r['policy']}'s {what}{needs}")
    if not parts:
        return ""
    text = (
        f" Paired over the {pairs} seeds (each seed's change against {base} at that seed; mean ± standard "
        f"error): {'; '.join(parts)}."
    )
    if open_:
        text += (
            f" Less than {DECIDED_AT:g} standard errors from its margin, these seeds cannot tell on which side "
            f"the policy is: {', '.join(open_)}."
        )
    return text


def _accuracy_changes_text(rows, key, preposition, what):
    """ "P's accuracy change was a to b points, within the margin at k of n seeds; ..." ('' without them)."""
    if not rows or not all(r.get(key) for r in rows):
        return ""
    return "; ".join(
        f"{r['policy']}'s accuracy change was {100 * min(r[key]):+.1f} to {100 * max(r[key]):+.1f} "
        f"points, within the margin {preposition} {sum(x >= -QUALITY_TOLERANCE for x in r[key])} "
        f"of {len(r[key])} {what}"
        for r in rows
    )
