"""The "Sample quality" section an evaluation adds to a run's report.md, the short texts acgan.evaluate
prints and acgan.compare's page shows of an evaluation, and where a run keeps its evaluations."""

from acgan.presets import EMA_STATISTICS
from acgan.quality import inception_stats, prdc
from acgan.util import markdown
from acgan.util.markdown import na


def result_file(result):
    """The file acgan.evaluate records `result` in: quality.json (which the report shows) for the run's
    own sampler at its newest checkpoint; beside it, --checkpoint best's in quality_best.json and G's own
    weights on a run that keeps their average (--no-ema) in quality_no_ema.json (both:
    quality_best_no_ema.json), and the average with other batch-norm statistics than the run's in
    quality_ema_CHOICE.json (e.g. quality_best_ema_standing.json)."""
    raw = result.get("generator") == "raw" and result.get("ema_decay")
    best = result.get("checkpoint") == "best"
    other = (
        result.get("generator") == "ema"
        and result["ema_statistics"] != result["run_ema_statistics"]
    )
    statistics = f"_ema_{result.get('ema_statistics')}" * other
    return f"quality{'_best' * best}{'_no_ema' * bool(raw)}{statistics}.json"


def lowest_margin(result):
    """The label under which D tells its class worst from the others, as `lowest: NAME +m against OTHER`."""
    margins = {name: m for name, m in result["d_class_margin_per_class"].items() if m is not None}
    name = min(margins, key=margins.get)
    return f"lowest: {name} {margins[name]:+.2f} against {result['d_class_nearest'][name]}"


def _counts(counts):
    """'1,000-1,200': the smallest and largest of per-class counts."""
    return f"{min(counts):,}-{max(counts):,}"


def _class_sizes(result):
    return (
        f"per class {_counts(result.get('num_real_per_class') or [0])} real test images vs "
        f"{_counts(result.get('num_generated_per_class') or [0])} generated"
    )


def span_text(spread, fmt):
    """'74.7%-81.1%' from one of across_judges' {min, max, mean} entries."""
    return f"{format(spread['min'], fmt)}-{format(spread['max'], fmt)}"


def across_judges_text(across):
    """'conditional accuracy 74.7%-81.1% (mean 77.5%), Fréchet distance 21.5-22.9, ...' for the report."""
    return ", ".join(
        f"{name} {span_text(across[key], fmt)} (mean {format(across[key]['mean'], fmt)})"
        for name, key, fmt in (
            ("conditional accuracy", "conditional_accuracy", ".1%"),
            ("Fréchet distance", "frechet_distance", ".2f"),
            ("mean per-class Fréchet distance", "frechet_distance_class_mean", ".2f"),
        )
        if across.get(key)
    )


def prdc_text(values, suffix="", fmt=".3f"):
    """'0.712 / 0.431 / 0.920 / 0.553': precision / recall / density / coverage from a result (or its
    real_reference), suffix "" (overall) or "_class_mean"; None when the result has no precision."""
    if values.get(f"precision{suffix}") is None:
        return None
    return " / ".join(format(values[f"{name}{suffix}"], fmt) for name in prdc.NAMES)


def prdc_rows(result):
    """The section's precision / recall / density / coverage rows (overall, mean per class), each beside
    its real-vs-real reference; none where the result has no such numbers."""
    reference = result.get("real_reference") or {}
    k = result.get("prdc_nearest_k")
    overall = f"{result['num_real']:,} real test images vs {result['num_generated']:,} generated"
    return [
        (
            f"{name}precision / recall / density / coverage (k-NN, k = {k}, judge features)",
            f"{prdc_text(result, suffix)} ({sizes}"
            + (f"; real vs real (reference): {ref})" if ref else ")")
            + (
                ""
                if suffix
                else ": precision and density say how real the samples look, recall and "
                "coverage how much of the real images they reach"
            ),
        )
        for suffix, name, sizes, ref in (
            ("", "", overall, prdc_text(reference)),
            (
                "_class_mean",
                "mean per-class ",
                _class_sizes(result),
                prdc_text(reference, "_class_mean"),
            ),
        )
        if prdc_text(result, suffix) is not None
    ]


def cas_text(score):
    """'33.3% (real train images instead: 96.5%)' for one classification_accuracy_score entry."""
    return f"{score['accuracy']:.1%} (real train images instead: {score['real_reference']['accuracy']:.1%})"


def generator_text(result):
    """Which generator an evaluation judged: G's moving average (its decay and batch-norm statistics) or
    G's own weights."""
    if result.get("generator") != "ema":
        return "G's own weights"
    return f"G's moving average (decay {result['ema_decay']:g}, {EMA_STATISTICS[result['ema_statistics']]})"


def render_markdown(result):
    """The report.md section for one evaluation."""
    judge = result.get("judge") or {}
    judge_line = (
        f"Judged by a float32 reference CNN (seed {judge.get('seed') or 0}) trained on the real train split "
        f"({na(judge.get('test_accuracy'), '.1%')} on {judge.get('num_test') or 0:,} held-out test images), never the GAN's own Q; "
        f"{generator_text(result)}, its {'best' if result['checkpoint'] == 'best' else 'newest'} checkpoint "
        f"(step {result['step']:,}), {result['num_generated']:,} generated samples "
        f"(classes balanced, seed {result['seed']})."
    )
    lines = ["## Sample quality", "", judge_line, ""] + markdown.table(
        ["", ""], summary_rows(result)
    )
    lines += [""] + per_class_table(result)
    lines += ["", f"`{result.get('command', '')}`"]
    return "\n".join(lines) + "\n"


def _kid_text(result):
    """KID's mean and spread over its subsets, and the real-vs-real reference where there is one."""
    kid = result["kernel_distance"]
    text = (
        f"{kid['mean']:.4f} ± {kid['std']:.4f} (unbiased, so it can read below 0; {kid['subsets']} subsets of "
        f"{kid['subset_size']:,} a side"
    )
    reference = (result.get("real_reference") or {}).get("kernel_distance")
    return text + (
        f"; real vs real: {reference['mean']:.4f} ± {reference['std']:.4f})" if reference else ")"
    )


def summary_rows(result):
    """The section's (name, value) rows: the judge's numbers, their references, Q's, D's margin, CAS, FID;
    a row whose value is empty (a number the result lacks) is left out."""
    sizes = f"{result['num_real']:,} real test images vs {result['num_generated']:,} generated"
    if result["num_real"] < result["num_generated"]:
        sizes += " (the test split holds fewer than asked; compare only at equal sizes)"
    reference = result.get("real_reference") or {}
    across = result.get("across_judges")
    class_mean = result.get("frechet_distance_class_mean")
    rows = [
        (
            "conditional accuracy (judge)",
            f"{na(result['conditional_accuracy'], '.1%')} (chance {na(result['chance'], '.1%')}; "
            f"real test images: {na(result.get('real_conditional_accuracy'), '.1%')})",
        ),
        (
            across
            and f"across {len(across['judges'])} judges (seeds "
            f"{', '.join(str(j['seed']) for j in across['judges'])}; the same samples)",
            across and across_judges_text(across),
        ),
        ("Fréchet distance, judge features", f"{result['frechet_distance']:.2f} ({sizes})"),
        (
            "Fréchet distance, real vs real (reference)",
            reference
            and f"{reference['frechet_distance']:.2f} ({reference['num_real']:,} real test images vs "
            f"{reference['num_train']:,} real train images: the floor a perfect generator would reach)",
        ),
        (
            "kernel distance (KID), judge features",
            result.get("kernel_distance") and _kid_text(result),
        ),
        (
            "mean per-class Fréchet distance (intra-class)",
            class_mean is not None and f"{class_mean:.2f} ({_class_sizes(result)})",
        ),
        (
            "mean per-class Fréchet distance, real vs real (reference)",
            reference.get("frechet_distance_class_mean") is not None
            and f"{reference['frechet_distance_class_mean']:.2f} (each class's real test images vs "
            "as many real train images of the class as were generated for it)",
        ),
        *prdc_rows(result),
        *_model_rows(result),
        *inception_rows(result.get("inception") or {}),
    ]
    return [(name, value) for name, value in rows if value]


def _model_rows(result):
    """The rows on the models themselves: the classifier score, Q's accuracy, D's class margin, CAS."""
    score = result.get("classification_accuracy_score")
    return [
        (
            "classifier score",
            f"{result['classifier_score']:.2f} (1 to {result['num_classes']}; real test "
            f"images: {result.get('real_classifier_score', float('nan')):.2f})",
        ),
        ("Q's accuracy on real test images", na(result.get("q_accuracy_real"), ".1%")),
        (
            "Q's accuracy on the generated samples (names the class G was asked for)",
            result.get("q_accuracy_generated") is not None
            and f"{result['q_accuracy_generated']:.1%} (the judge: "
            f"{na(result['conditional_accuracy'], '.1%')}; where Q is far above the judge, G draws "
            "what its own Q accepts rather than what the class looks like)",
        ),
        (
            "D's class margin (mean over classes)",
            result.get("d_class_margin_mean") is not None
            and f"{result['d_class_margin_mean']:+.2f}: under each class's label, D's mean logit for "
            "that class's real images minus for the other class it scores highest, per class "
            "below (G asked for a class is pushed towards it only as far as this is positive)",
        ),
        (
            "classification accuracy score (CAS)",
            score
            and f"{cas_text(score)}: the judge's CNN trained on the {score['num_train']:,} samples, "
            f"scored on the {score['num_test']:,} real test images; the reference trained on as "
            "many real train images per class. Low where G draws a class as something its real "
            "images are not",
        ),
    ]


def _score_text(mean, std):
    return "n/a" if mean is None else f"{mean:.2f} ± {std:.2f}"


def _real_text(entry):
    """'50,000 real train images', or the statistics file the FID's real side was read from."""
    return (
        f"{entry['num_real']:,} real train images"
        if entry["num_real"] is not None
        else entry["real"]
    )


def inception_text(entry):
    """The printed line of a computed "inception" entry: the standard FID, KID, iFID and Inception score,
    their sizes and the graph file."""
    kid = entry.get("kernel_distance")
    return (
        f"standard FID {entry['fid']:.2f} ({entry['num_generated']:,} generated vs {_real_text(entry)}), "
        + (
            f"KID {kid['mean']:.4f} ± {kid['std']:.4f}, mean per-class FID (iFID) "
            f"{na(entry['fid_class_mean'], '.2f')}, "
            if kid
            else ""
        )
        + f"Inception score {_score_text(entry['inception_score'], entry['inception_score_std'])} "
        f"(real train images "
        f"{_score_text(entry['real_inception_score'], entry['real_inception_score_std'])}); the 2015 "
        f"Inception graph {entry['graph']}, sha256 {entry['sha256']}"
    )


def inception_rows(entry):
    """The section's rows of the standard FID, KID, per-class FID and Inception score (those the entry
    has), or one row saying why there are none."""
    if entry.get("fid") is None:
        return [("FID and Inception score, standard", entry.get("note", "n/a"))]
    rows = [
        (
            f"FID, standard (2015 Inception graph, {entry['feature_dim']}-d pool_3)",
            f"{entry['fid']:.2f} ({entry['num_generated']:,} generated vs {_real_text(entry)}; "
            f"{entry['note']})",
        ),
        (
            "kernel distance (KID), standard (pool_3)",
            entry.get("kernel_distance") and _kid_text(entry),
        ),
        (
            "mean per-class FID (iFID), standard",
            entry.get("fid_class_mean") is not None
            and f"{entry['fid_class_mean']:.2f} (each class's generated images against its train images, "
            f"per class below; {_counts(entry['num_generated_per_class'])} generated vs "
            f"{_counts(entry['num_real_per_class'])} real a class)",
        ),
        (
            "Inception score, standard",
            f"{_score_text(entry['inception_score'], entry['inception_score_std'])} (mean ± standard deviation over "
            f"{entry['splits']} splits of the {entry['num_generated']:,} generated; real train images: "
            f"{_score_text(entry['real_inception_score'], entry['real_inception_score_std'])})",
        ),
        ("Inception graph", f"`{entry['graph']}` (sha256 {entry['sha256']})"),
        (
            "real statistics (--inception_stats)",
            entry.get("real_statistics") and inception_stats.report_text(entry["real_statistics"]),
        ),
    ]
    return [(name, value) for name, value in rows if value]


def _class_prdc_text(result, name):
    """'0.71 / 0.43 / 0.92 / 0.55 (0.75 / 0.74 / 1.00 / 0.96)' for one class; n/a where it has too few
    samples on a side."""

    def of(values):
        return prdc_text(
            {key: (values.get(f"{key}_per_class") or {}).get(name) for key in prdc.NAMES}, fmt=".2f"
        )

    text, ref = of(result), of(result.get("real_reference") or {})
    return (text or "n/a") + (f" ({ref})" if ref else "")


def per_class_table(result):
    """One row per class: the judge's accuracy and distances, with Q's accuracies, CAS, D's class margin and
    the standard per-class FID where the result has them."""
    score = result.get("classification_accuracy_score") or {}
    class_fd = result.get("frechet_distance_per_class") or {}
    reference_fd = (result.get("real_reference") or {}).get("frechet_distance_per_class") or {}
    q_real = result.get("q_accuracy_real_per_class") or {}
    q_generated = result.get("q_accuracy_generated_per_class") or {}
    cas_real = (score.get("real_reference") or {}).get("per_class") or {}
    margins, nearest = (
        result.get("d_class_margin_per_class") or {},
        result.get("d_class_nearest") or {},
    )
    ifid = (result.get("inception") or {}).get("fid_per_class") or {}
    q_columns = bool(q_real and q_generated)
    prdc = result.get("precision_per_class")
    header = (
        ["class", "conditional accuracy", "Fréchet distance", "real vs real (reference)"]
        + (["precision / recall / density / coverage (real vs real)"] if prdc else [])
        + (["Q on real", "Q on generated"] if q_columns else [])
        + (["CAS", "CAS, real"] if score else [])
        + (["D's class margin (closest class)"] if margins else [])
        + (["iFID, standard"] if ifid else [])
    )
    rows = [
        [name, na(acc, ".1%"), na(class_fd.get(name), ".2f"), na(reference_fd.get(name), ".2f")]
        + ([_class_prdc_text(result, name)] if prdc else [])
        + ([na(q_real.get(name), ".1%"), na(q_generated.get(name), ".1%")] if q_columns else [])
        + (
            [na(score["per_class"].get(name), ".1%"), na(cas_real.get(name), ".1%")]
            if score
            else []
        )
        + ([f"{na(margins.get(name), '+.2f')} ({nearest.get(name)})"] if margins else [])
        + ([na(ifid.get(name), ".2f")] if ifid else [])
        for name, acc in result["conditional_accuracy_per_class"].items()
    ]
    return markdown.table(header, rows)


def summary_line(result):
    """The line acgan.evaluate prints of an evaluation."""
    reference = result.get("real_reference") or {}

    def ref(key):
        return f" (real vs real {reference[key]:.2f})" if reference.get(key) is not None else ""

    class_mean = result.get("frechet_distance_class_mean")
    prdc_values, prdc_reference = prdc_text(result), prdc_text(reference)
    return (
        f"step {result['step']}: conditional accuracy {result['conditional_accuracy']:.1%} "
        f"(chance {result['chance']:.0%}), Fréchet distance {result['frechet_distance']:.2f}"
        f"{ref('frechet_distance')} ({result['num_real']} real vs {result['num_generated']} generated), "
        + (
            f"mean per-class Fréchet distance {class_mean:.2f}{ref('frechet_distance_class_mean')}, "
            if class_mean is not None
            else ""
        )
        + (
            f"precision / recall / density / coverage {prdc_values} ("
            + (f"real vs real {prdc_reference}; " if prdc_reference else "")
            + f"k = {result['prdc_nearest_k']}), "
            if prdc_values
            else ""
        )
        + f"classifier score "
        f"{result['classifier_score']:.2f}, Q on real test images {result['q_accuracy_real']:.1%}, "
        f"Q on the generated samples {result['q_accuracy_generated']:.1%}"
        + (
            f", D's class margin {result['d_class_margin_mean']:+.2f} ({lowest_margin(result)})"
            if result.get("d_class_margin_mean") is not None
            else ""
        )
        + (
            f", classification accuracy score {cas_text(result['classification_accuracy_score'])}"
            if result.get("classification_accuracy_score")
            else ""
        )
    )
