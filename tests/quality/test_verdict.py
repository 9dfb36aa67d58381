"""The compare verdict: quality held only when conditional accuracy AND the Fréchet distance held,
the distance judged against float32's and the real-vs-real reference at the same sample sizes."""

import pytest

from acgan.quality import verdict


def row(policy, accuracy, fd, reference=0.25):
    return {
        "policy": policy,
        "time_per_batch_median_ms": 100.0,
        "conditional_accuracy": accuracy,
        "frechet_distance": fd,
        "real_reference": {
            "frechet_distance": reference,
            "num_real": 5000,
            "num_train": 10000,
            "what": "x",
        },
    }


def test_a_worse_frechet_distance_fails_the_verdict_even_with_better_accuracy():
    # The README's own numbers: mixed_float16's accuracy above float32's, its distance 30% worse.
    rows = [
        row("float32", 0.979, 24.3),
        row("mixed_float16", 0.993, 31.6),
        row("mixed_bfloat16", 0.996, 26.1),
    ]
    verdict.add_baseline(rows)
    assert [r["accuracy_held"] for r in rows] == [True, True, True]
    assert [r["frechet_held"] for r in rows] == [True, False, True]
    assert [r["quality_held"] for r in rows] == [True, False, True]
    assert rows[0]["frechet_limit"] == pytest.approx(24.3 * (1 + verdict.FD_RELATIVE_TOLERANCE))
    text = verdict.verdict(rows)
    assert text.startswith("Quality did not hold for mixed_float16 (Fréchet distance 31.60 (+30%))")
    assert "real-vs-real reference 0.25" in text


def test_accuracy_alone_can_fail_it_and_both_holding_passes():
    rows = [row("float32", 0.95, 10.0), row("mixed_bfloat16", 0.90, 10.5)]
    verdict.add_baseline(rows)
    assert not rows[1]["quality_held"] and "conditional accuracy -5.0 points" in verdict.verdict(
        rows
    )
    rows = [row("float32", 0.95, 10.0), row("mixed_bfloat16", 0.94, 11.0)]
    verdict.add_baseline(rows)
    assert rows[1]["quality_held"] and verdict.verdict(rows).startswith(
        "Quality held for every policy"
    )


def test_near_the_data_the_reference_sets_the_tolerance():
    # A baseline at 1.0 with a reference of 0.3: +15% would be 1.15, but 3 references allow 1.9.
    rows = [
        row("float32", 0.99, 1.0, reference=0.3),
        row("mixed_float16", 0.99, 1.8, reference=0.3),
    ]
    verdict.add_baseline(rows)
    assert rows[1]["frechet_limit"] == pytest.approx(1.0 + verdict.FD_REFERENCE_MULTIPLE * 0.3)
    assert rows[1]["quality_held"]


def test_the_mean_per_class_distance_is_judged_by_the_same_rule_when_both_runs_have_it():
    def with_classes(r, mean, reference_mean=1.0):
        r["frechet_distance_class_mean"] = mean
        r["real_reference"]["frechet_distance_class_mean"] = reference_mean
        return r

    # Overall distance and accuracy hold, but one class collapsed: the per-class mean is 40% worse.
    rows = [
        with_classes(row("float32", 0.95, 10.0), 20.0),
        with_classes(row("mixed_float16", 0.95, 10.5), 28.0),
    ]
    verdict.add_baseline(rows)
    assert (
        rows[1]["frechet_held"]
        and rows[1]["class_frechet_held"] is False
        and not rows[1]["quality_held"]
    )
    assert rows[1]["class_frechet_limit"] == pytest.approx(23.0)
    assert "mean per-class Fréchet distance 28.00 (+40%, limit 23.00)" in verdict.verdict(rows)
    # Older rows without it are judged as before.
    rows = [row("float32", 0.95, 10.0), row("mixed_float16", 0.95, 10.5)]
    verdict.add_baseline(rows)
    assert rows[1]["class_frechet_held"] is None and rows[1]["quality_held"]


def test_several_training_seeds_are_averaged_and_the_verdict_is_on_the_means():
    def run(policy, seed, accuracy, fd, class_fd, judge_accuracies):
        r = row(policy, accuracy, fd)
        r["real_reference"]["frechet_distance_class_mean"] = 1.0
        r.update(
            seed=seed,
            steps=100 + seed,
            run_dir=f"{policy}-seed{seed}",
            status="completed",
            skipped_steps=1,
            frechet_distance_class_mean=class_fd,
            frechet_distance_per_class={"a": class_fd, "b": 2 * class_fd},
            across_judges={
                "judges": [
                    {
                        "seed": j,
                        "conditional_accuracy": a,
                        "frechet_distance": fd,
                        "frechet_distance_class_mean": class_fd,
                        "conditional_accuracy_per_class": {"a": a, "b": a},
                    }
                    for j, a in enumerate(judge_accuracies)
                ]
            },
        )
        for key in (
            "loop_seconds",
            "compile_seconds",
            "time_per_batch_ms",
            "time_per_1000_samples_ms",
            "cost_per_million_batches",
            "peak_memory_bytes",
            "classifier_score",
            "q_accuracy_real",
            "q_accuracy_generated",
            "inception_fid",
        ):
            r[key] = None
        return r

    # mixed_float16 trails by 5 points at seed 0 and leads by 1 at seed 1: -2 points on the means, held.
    rows = [
        verdict.combine_seeds(
            [
                run("float32", 0, 0.80, 20.0, 40.0, [0.80, 0.70]),
                run("float32", 1, 0.70, 30.0, 60.0, [0.70, 0.74]),
            ]
        ),
        verdict.combine_seeds(
            [
                run("mixed_float16", 0, 0.75, 21.0, 42.0, [0.75, 0.70]),
                run("mixed_float16", 1, 0.71, 33.0, 63.0, [0.71, 0.70]),
            ]
        ),
    ]
    base, mixed = rows
    assert base["conditional_accuracy"] == pytest.approx(0.75) and base[
        "frechet_distance"
    ] == pytest.approx(25.0)
    assert (
        base["steps"] == 100 and base["skipped_steps"] == 2 and base["run_dir"] == "float32-seed0"
    )
    assert base["frechet_distance_per_class"] == pytest.approx({"a": 50.0, "b": 100.0})
    assert base["across_seeds"]["conditional_accuracy"] == pytest.approx(
        {"min": 0.70, "max": 0.80, "mean": 0.75}
    )
    assert [r["seed"] for r in base["across_seeds"]["runs"]] == [0, 1]
    # Each judge's numbers are that judge's mean over the seeds; the spread is over those means.
    assert [j["conditional_accuracy"] for j in mixed["across_judges"]["judges"]] == pytest.approx(
        [0.73, 0.70]
    )
    assert mixed["across_judges"]["conditional_accuracy"]["min"] == pytest.approx(0.70)
    verdict.add_baseline(rows)
    assert mixed["accuracy_change"] == pytest.approx(-0.02) and mixed["accuracy_held"]
    assert mixed["conditional_accuracy_change_across_seeds"] == pytest.approx([-0.05, 0.01])
    assert mixed["frechet_distance_change_across_seeds"] == pytest.approx([0.05, 0.10])
    assert mixed["frechet_distance_class_mean_change_across_seeds"] == pytest.approx([0.05, 0.05])
    assert mixed["accuracy_change_across_judges"] == pytest.approx([-0.02, -0.02])
    # Paired over the seeds: accuracy -2 points, standard error 0.04243 / sqrt(2) = 3 points, so the -3-point
    # margin is 1/3 of a standard error away (undecided; (2 x 4.243 / 1)^2 = 72.0 -> about 73 pairs); the
    # distance +7.5% +- 2.5%, 3 standard errors inside +15% (decided); the per-class changes agree exactly.
    accuracy = mixed["conditional_accuracy_change_paired"]
    assert accuracy["pairs"] == 2 and accuracy["mean"] == pytest.approx(-0.02)
    assert accuracy["standard_error"] == pytest.approx(0.03)
    assert accuracy["held_side_in_standard_errors"] == pytest.approx(1 / 3)
    assert accuracy["pairs_to_decide"] in (72, 73)
    distance = mixed["frechet_distance_change_paired"]
    assert distance["held_side_in_standard_errors"] == pytest.approx(3.0) and distance[
        "standard_error"
    ] == pytest.approx(0.025)
    assert (
        mixed["frechet_distance_class_mean_change_paired"]["held_side_in_standard_errors"] is None
    )
    assert base["conditional_accuracy_change_paired"]["held_side_in_standard_errors"] is None
    assert mixed["quality_held"]  # distance 27.0 <= 28.75, per class 52.5 <= 57.5
    text = verdict.verdict(rows)
    assert text.startswith("Quality held for every policy")
    assert (
        "means over 2 training seeds" in text
        and "-5.0 to +1.0 points, within the margin at 1 of 2 seeds" in text
    )
    assert (
        "mixed_float16's accuracy -2.0 ± 3.0 points, 0.3 standard errors on the held side of -3 points; "
        "distance +8 ± "
    ) in text
    assert (
        "3.0 standard errors on the held side of +15%; per-class distance +5 ± 0%, no spread between the "
        "seeds."
    ) in text
    assert (
        "these seeds cannot tell on which side the policy is: mixed_float16's accuracy "
        f"(about {accuracy['pairs_to_decide']} pairs at this spread)."
    ) in text
    # A policy on the failing side by more than 2 standard errors is decided, and named nowhere as open.
    assert verdict.paired_summary([0.30, 0.40, 0.35], 0.15, held_above=False)[
        "held_side_in_standard_errors"
    ] == pytest.approx(-(0.35 - 0.15) / (0.05 / 3**0.5))
    assert verdict.paired_summary([0.1], 0.15, held_above=False) is None
    assert verdict.paired_summary([0.1, None], 0.15, held_above=False) is None
    # One seed: the run is the row, as before.
    single = run("float32", 0, 0.8, 20.0, 40.0, [0.8])
    assert verdict.combine_seeds([single]) is single


def test_the_page_renders_from_the_rows_alone():
    """compare.md from judged rows, no training: one column per policy, the verdict, the notes."""
    from acgan.quality import compare_page

    rows = [row("float32", 0.95, 10.0), row("mixed_float16", 0.90, 10.5)]
    for r in rows:
        r.update(
            steps=500,
            time_per_batch_ms=110.0,
            time_per_1000_samples_ms=1500.0,
            cost_per_million_batches=None,
            compile_seconds=3.0,
            peak_memory_bytes=2**30,
            skipped_steps=0,
            classifier_score=8.0,
            q_accuracy_real=0.97,
            inception_fid=None,
            inception_note="not applicable",
            num_real=1000,
            num_generated=1000,
            report_md=f"{r['policy']}/report.md",
        )
    rows[1]["time_per_batch_median_ms"] = 50.0
    verdict.add_baseline(rows)
    doc = {
        "rows": rows,
        "command": "acgan.compare --steps 500",
        "device": {"kind": "CPU", "name": "x86_64"},
        "judge": {"test_accuracy": 0.98, "num_test": 1000},
        "settings": {
            "dataset": "doodles",
            "batch": 64,
            "width": 1.0,
            "steps": 500,
            "minutes": None,
            "seed": 0,
            "jit": True,
            "price_per_hour": None,
            "policies": ["float32", "mixed_float16"],
        },
    }
    page = compare_page.render_markdown(doc)
    assert page.startswith(
        "# Mixed precision compared: doodles, batch 64, width 1, 500 steps each\n"
    )
    assert (
        "\n| | float32 | mixed_float16 |\n|---|---|---|\n| status | completed | completed |\n"
        in page
    )
    assert "\n| speed-up vs float32 | 1.00x | 2.00x |\n" in page
    assert "\n| quality held | yes | **no** |\n" in page
    assert "\n| run | [report](float32/report.md) | [report](mixed_float16/report.md) |\n" in page
    assert "\nQuality did not hold for mixed_float16 (conditional accuracy -5.0 points)" in page
    assert "\nInception FID: not applicable.\n" in page and page.endswith(
        "![final sample grids](compare.png)\n"
    )
    assert "never the GAN's own Q), on each run's generator itself (no moving average" in page
    for r in rows:
        r.update(generator="ema", ema_decay=0.999)
    assert (
        "never the GAN's own Q), on the moving average of each run's G (decay 0.999)"
        in compare_page.render_markdown(doc)
    )
    rows[1]["generator"] = "raw"
    assert (
        "on the moving average of G where a run kept one, else on G itself"
        in compare_page.render_markdown(doc)
    )
