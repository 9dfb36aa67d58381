"""The per-class (intra-class) Fréchet distance and its real-vs-real reference at equal per-class sizes."""

import numpy as np
import pytest

from acgan.data.image_set import ImageSet
from acgan.quality import metrics


def features(rng, n_per_class, num_classes=3, dim=8):
    centres = rng.normal(0, 3, (num_classes, dim))
    labels = np.repeat(np.arange(num_classes), n_per_class)
    return centres[labels] + rng.normal(0, 1, (len(labels), dim)), labels


def test_identical_sets_score_zero_per_class_and_in_the_mean():
    x, y = features(np.random.default_rng(0), 200)
    per_class, mean = metrics.per_class_frechet(x, y, x, y, 3)
    assert per_class == pytest.approx([0, 0, 0], abs=1e-6) and mean == pytest.approx(0, abs=1e-6)


def test_a_collapsed_class_is_large_for_that_class_only():
    rng = np.random.default_rng(1)
    real, labels = features(rng, 400)
    fake = real.copy()
    one = labels == 1
    # class 1 collapsed to one image
    fake[one] = fake[one][0] + rng.normal(0, 0.01, fake[one].shape)
    per_class, mean = metrics.per_class_frechet(real, labels, fake, labels, 3)
    assert per_class[1] > 5.0 and per_class[0] < 1e-6 and per_class[2] < 1e-6
    assert mean == pytest.approx(per_class[1] / 3)
    # The overall distance dilutes it: the pooled sets differ by far less than the class alone.
    assert metrics.frechet_distance_of(real, fake) < per_class[1] / 2


def test_a_class_without_two_samples_on_a_side_is_none_and_left_out_of_the_mean():
    x, y = features(np.random.default_rng(2), 50)
    keep = (y != 2) | (np.arange(len(y)) == np.flatnonzero(y == 2)[0])
    per_class, mean = metrics.per_class_frechet(x, y, x[keep], y[keep], 3)
    assert per_class[2] is None and mean == pytest.approx(np.mean(per_class[:2]))


def test_the_reference_subset_has_the_generated_sides_per_class_sizes_and_is_fixed_by_the_seed():
    labels = np.repeat(np.arange(4, dtype=np.int32), [30, 10, 25, 5])
    data = ImageSet(
        np.arange(70 * 4, dtype=np.uint8).reshape(70, 2, 2, 1) % 250, labels, ("a", "b", "c", "d")
    )
    counts = metrics.class_counts(np.arange(40) % 4, 4)
    assert counts.tolist() == [10, 10, 10, 10]
    images, got = metrics.per_class_subset(data, counts, seed=0)
    assert metrics.class_counts(got, 4).tolist() == [
        10,
        10,
        10,
        5,
    ]  # class d has only 5: all of them
    again, _ = metrics.per_class_subset(data, counts, seed=0)
    other, _ = metrics.per_class_subset(data, counts, seed=1)
    assert again.tobytes() == images.tobytes() and other.tobytes() != images.tobytes()


def test_metrics_stays_pure_numpy():
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(metrics))
    imported = {
        a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported == {"numpy"}


def test_tensorboard_gets_each_class_accuracy_and_distance_and_skips_unknown_ones():
    from acgan.quality.evaluation import scalars

    result = {
        "conditional_accuracy": 0.9,
        "frechet_distance": 3.0,
        "frechet_distance_class_mean": 4.0,
        "conditional_accuracy_per_class": {"stripes": 1.0, "checks": 0.25, "dots": None},
        "frechet_distance_per_class": {"stripes": 2.0, "checks": 6.0, "dots": None},
    }
    out = scalars(result)
    # the class an overall number hides
    assert out["quality/conditional_accuracy_class/checks"] == 0.25
    assert (
        out["quality/frechet_distance_class/checks"] == 6.0
        and out["quality/conditional_accuracy"] == 0.9
    )
    assert not any(k.endswith("/dots") for k in out)  # no samples of it: nothing logged, not a zero
