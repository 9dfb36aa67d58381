"""The compare verdict: quality held only when conditional accuracy AND the Fréchet distance held,
the distance judged against float32's and the real-vs-real reference at the same sample sizes."""
import pytest

from acgan.quality import comparison


def row(policy, accuracy, fd, reference=0.25):
    return {"policy": policy, "time_per_batch_median_ms": 100.0, "conditional_accuracy": accuracy,
            "frechet_distance": fd, "real_reference": {"frechet_distance": reference, "num_real": 5000,
                                                       "num_train": 10000, "what": "x"}}


def test_a_worse_frechet_distance_fails_the_verdict_even_with_better_accuracy():
    # The README's own numbers: mixed_float16's accuracy above float32's, its distance 30% worse.
    rows = [row("float32", 0.979, 24.3), row("mixed_float16", 0.993, 31.6), row("mixed_bfloat16", 0.996, 26.1)]
    comparison.add_baseline(rows)
    assert [r["accuracy_held"] for r in rows] == [True, True, True]
    assert [r["frechet_held"] for r in rows] == [True, False, True]
    assert [r["quality_held"] for r in rows] == [True, False, True]
    assert rows[0]["frechet_limit"] == pytest.approx(24.3 * (1 + comparison.FD_RELATIVE_TOLERANCE))
    text = comparison.verdict(rows)
    assert text.startswith("Quality did not hold for mixed_float16 (Fréchet distance 31.60 (+30%))")
    assert "real-vs-real reference 0.25" in text


def test_accuracy_alone_can_fail_it_and_both_holding_passes():
    rows = [row("float32", 0.95, 10.0), row("mixed_bfloat16", 0.90, 10.5)]
    comparison.add_baseline(rows)
    assert not rows[1]["quality_held"] and "conditional accuracy -5.0 points" in comparison.verdict(rows)
    rows = [row("float32", 0.95, 10.0), row("mixed_bfloat16", 0.94, 11.0)]
    comparison.add_baseline(rows)
    assert rows[1]["quality_held"] and comparison.verdict(rows).startswith("Quality held for every policy")


def test_near_the_data_the_reference_sets_the_tolerance():
    # A baseline at 1.0 with a reference of 0.3: +15% would be 1.15, but 3 references allow 1.9.
    rows = [row("float32", 0.99, 1.0, reference=0.3), row("mixed_float16", 0.99, 1.8, reference=0.3)]
    comparison.add_baseline(rows)
    assert rows[1]["frechet_limit"] == pytest.approx(1.0 + comparison.FD_REFERENCE_MULTIPLE * 0.3)
    assert rows[1]["quality_held"]


def test_the_mean_per_class_distance_is_judged_by_the_same_rule_when_both_runs_have_it():
    def with_classes(r, mean, reference_mean=1.0):
        r["frechet_distance_class_mean"] = mean
        r["real_reference"]["frechet_distance_class_mean"] = reference_mean
        return r

    # Overall distance and accuracy hold, but one class collapsed: the per-class mean is 40% worse.
    rows = [with_classes(row("float32", 0.95, 10.0), 20.0), with_classes(row("mixed_float16", 0.95, 10.5), 28.0)]
    comparison.add_baseline(rows)
    assert rows[1]["frechet_held"] and rows[1]["class_frechet_held"] is False and not rows[1]["quality_held"]
    assert rows[1]["class_frechet_limit"] == pytest.approx(23.0)
    assert "mean per-class Fréchet distance 28.00 (+40%, limit 23.00)" in comparison.verdict(rows)
    # Older rows without it are judged as before.
    rows = [row("float32", 0.95, 10.0), row("mixed_float16", 0.95, 10.5)]
    comparison.add_baseline(rows)
    assert rows[1]["class_frechet_held"] is None and rows[1]["quality_held"]
