"""Precision, recall, density and coverage (acgan.quality.prdc) on constructed cases and against a
brute-force copy of the `prdc` reference implementation."""

import numpy as np
import pytest

from acgan.quality import prdc


def brute_force(real, fake, k):
    """The `prdc` package's compute_prdc, all distances at once."""

    def distances(a, b):
        return np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))

    real_radii = np.sort(distances(real, real), axis=1)[:, k]  # column 0: the point itself
    fake_radii = np.sort(distances(fake, fake), axis=1)[:, k]
    d = distances(real, fake)
    return {
        "precision": (d < real_radii[:, None]).any(axis=0).mean(),
        "recall": (d < fake_radii[None, :]).any(axis=1).mean(),
        "density": (d < real_radii[:, None]).sum(axis=0).mean() / k,
        "coverage": (d.min(axis=1) < real_radii).mean(),
    }


@pytest.mark.parametrize(
    "n_real, n_fake, k, chunk",
    [(60, 60, 5, 7), (80, 45, 3, 1000), (33, 70, 5, 1), (50, 50, 1, 1 << 22)],
)
def test_it_matches_a_brute_force_implementation_whatever_the_blocks(n_real, n_fake, k, chunk):
    rng = np.random.default_rng(n_real + n_fake + k)
    # far from the origin: the expansion's rounding at work
    real = rng.normal(size=(n_real, 6)) * 3 + 10
    fake = rng.normal(0.5, 1.2, size=(n_fake, 6)) * 3 + 10
    got = prdc.prdc(real, fake, k, chunk_elements=chunk)
    assert got == pytest.approx(brute_force(real, fake, k), abs=1e-12)


def test_blocks_hold_about_chunk_elements_distances():
    a, b = np.zeros((100, 3)), np.zeros((40, 3))
    shapes = [block.shape for _, block in prdc._squared_distance_blocks(a, b, chunk_elements=400)]
    assert shapes == [(10, 40)] * 10
    assert [block.shape for _, block in prdc._squared_distance_blocks(a, b, chunk_elements=10)][
        0
    ] == (1, 40)


def test_identical_sets_score_one_on_every_number():
    x = np.random.default_rng(0).normal(size=(500, 16))
    got = prdc.prdc(x, x.copy())
    assert got["precision"] == got["recall"] == got["coverage"] == 1.0
    # Each real ball holds its centre and its k - 1 nearest neighbours (the k-th lies on the boundary).
    assert got["density"] == pytest.approx(1.0, abs=1e-9)


def test_two_samples_of_one_distribution_score_the_real_vs_real_levels():
    """Naeem et al.: for equal sizes of one distribution, coverage is about 1 - 2^-k and density about 1;
    precision and recall, at k = 5 in 16 dimensions, well below 1 though nothing differs."""
    rng = np.random.default_rng(1)
    got = prdc.prdc(rng.normal(size=(2000, 16)), rng.normal(size=(2000, 16)))
    assert got["coverage"] == pytest.approx(1 - 2.0**-prdc.NEAREST_K, abs=0.02)
    assert got["density"] == pytest.approx(1.0, abs=0.1)
    assert 0.5 < got["precision"] < 0.95 and 0.5 < got["recall"] < 0.95


def test_a_collapsed_set_has_high_precision_and_recall_and_coverage_near_zero():
    rng = np.random.default_rng(2)
    real = rng.normal(size=(1000, 16))
    at_one_point = prdc.prdc(real, np.repeat(real[:1], 1000, axis=0))
    # its balls have radius 0
    assert at_one_point["precision"] == 1.0 and at_one_point["recall"] == 0.0
    assert at_one_point["coverage"] <= 0.01
    cluster = prdc.prdc(real, real[0] + rng.normal(0, 1e-3, (1000, 16)))
    assert (
        cluster["precision"] == 1.0 and cluster["recall"] <= 0.002 and cluster["coverage"] <= 0.01
    )


def test_precision_and_recall_fall_as_the_samples_move_away():
    rng = np.random.default_rng(3)
    real = rng.normal(size=(1000, 16))
    shifts = (0.0, 1.0, 2.0, 4.0, 8.0)  # the shift vector's length, in standard deviations
    scores = [prdc.prdc(real, rng.normal(size=(1000, 16)) + shift / 4.0) for shift in shifts]
    for name in prdc.NAMES:
        values = [s[name] for s in scores]
        assert all(a > b for a, b in zip(values, values[1:])), (name, values)
    assert (
        scores[-1]["precision"] < 0.05
        and scores[-1]["recall"] < 0.05
        and scores[-1]["coverage"] < 0.05
    )


def test_a_side_with_k_or_fewer_points_is_none_per_class_too_and_left_out_of_the_mean():
    rng = np.random.default_rng(4)
    real, fake = rng.normal(size=(40, 4)), rng.normal(size=(40, 4))
    assert prdc.prdc(real[:5], fake) is None and prdc.prdc(real, fake[:5]) is None
    assert prdc.prdc(real[:6], fake[:6]) is not None  # k = 5 needs 6: each point's 5 others
    labels = np.repeat([0, 1], 20)
    fake_labels = np.where(np.arange(40) < 35, 0, 1)  # class 1: 5 samples, one too few
    out = prdc.measure(real, labels, fake, fake, fake_labels, ("a", "b", "c"))
    class_a = prdc.prdc(real[:20], fake[:35])
    for name in prdc.NAMES:
        assert out[f"{name}_per_class"] == {"a": class_a[name], "b": None, "c": None}
    assert out["prdc_nearest_k"] == 5 and out["recall"] == prdc.prdc(real, fake)["recall"]
    # the classes without a number left out
    assert out["density_class_mean"] == class_a["density"]
    empty = prdc.entries(None, [None, None], ("a", "b"))
    assert empty["precision"] is None and empty["precision_class_mean"] is None


def test_the_class_mean_averages_the_classes_that_have_numbers():
    per_class = [
        {"precision": 1.0, "recall": 0.0, "density": 2.0, "coverage": 0.5},
        None,
        {"precision": 0.5, "recall": 1.0, "density": 1.0, "coverage": 0.0},
    ]
    assert prdc.class_mean(per_class) == {
        "precision": 0.75,
        "recall": 0.5,
        "density": 1.5,
        "coverage": 0.25,
    }
    assert prdc.class_mean([None]) is None


def test_prdc_stays_pure_numpy():
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(prdc))
    imported = {
        a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported == {"numpy"}


# ---- in the report, the printed summary, TensorBoard, the training report and acgan.compare's page ----


def _result():
    """An evaluation's result with its precision, recall, density and coverage: class c has 3 samples,
    too few for k = 5."""
    rng = np.random.default_rng(5)
    names = ("a", "b", "c")
    real, real_labels = rng.normal(size=(60, 8)), np.repeat(np.arange(3), 20)
    fake, fake_labels = (
        rng.normal(0.3, 1, (60, 8)),
        np.where(np.arange(60) < 57, np.arange(60) % 2, 2),
    )
    train = rng.normal(size=(60, 8))
    reference = dict(
        frechet_distance=0.5,
        num_real=60,
        num_train=60,
        **prdc.measure(real, real_labels, train, train, real_labels, names),
    )
    return dict(
        step=10,
        checkpoint="latest",
        generator="raw",
        num_generated=60,
        num_real=60,
        seed=0,
        num_classes=3,
        chance=1 / 3,
        conditional_accuracy=0.5,
        conditional_accuracy_per_class=dict(zip(names, [0.5, 0.4, 0.0])),
        frechet_distance=3.0,
        frechet_distance_per_class=dict(zip(names, [1.0, 2.0, None])),
        frechet_distance_class_mean=1.5,
        num_real_per_class=[20, 20, 20],
        num_generated_per_class=[29, 28, 3],
        classifier_score=2.0,
        inception={"note": "n/a"},
        real_reference=reference,
        **prdc.measure(real, real_labels, fake, fake, fake_labels, names),
    )


def test_the_report_section_shows_each_number_beside_its_reference_and_per_class():
    from acgan.quality.report_section import prdc_text, render_markdown

    result = _result()
    ref = result["real_reference"]
    assert (
        result["precision_per_class"]["c"] is None and ref["precision_per_class"]["c"] is not None
    )
    assert prdc_text(result) == " / ".join(f"{result[n]:.3f}" for n in prdc.NAMES)
    text = render_markdown(result)
    assert (
        f"| precision / recall / density / coverage (k-NN, k = 5, judge features) | {prdc_text(result)} (60 real "
        f"test images vs 60 generated; real vs real (reference): {prdc_text(ref)}): precision and density"
    ) in text
    assert (
        f"| mean per-class precision / recall / density / coverage (k-NN, k = 5, judge features) | "
        f"{prdc_text(result, '_class_mean')} (per class 20-20 real test images vs 3-29 generated; real vs real "
        f"(reference): {prdc_text(ref, '_class_mean')}) |"
    ) in text
    assert result["recall_class_mean"] == pytest.approx(
        (result["recall_per_class"]["a"] + result["recall_per_class"]["b"]) / 2
    )
    assert "| precision / recall / density / coverage (real vs real) |" in text

    def cell(values, name):
        return " / ".join(f"{values[f'{n}_per_class'][name]:.2f}" for n in prdc.NAMES)

    assert f"| {cell(result, 'a')} ({cell(ref, 'a')}) |" in text
    assert f"| n/a ({cell(ref, 'c')}) |" in text  # 3 samples: too few for k = 5


def test_the_printed_summary_the_training_report_and_tensorboard_carry_them():
    from acgan.quality.evaluation import scalars
    from acgan.quality.report_section import prdc_text, summary_line
    from acgan.training.report import _quality_during_training

    result = dict(_result(), q_accuracy_real=0.9, q_accuracy_generated=0.8)
    ref = result["real_reference"]
    assert (
        f"precision / recall / density / coverage {prdc_text(result)} (real vs real {prdc_text(ref)}; k = 5), "
        "classifier score"
    ) in summary_line(result)
    assert (
        f"precision / recall / density / coverage {prdc_text(result, fmt='.2f')} (real vs real "
        f"{prdc_text(ref, fmt='.2f')})."
    ) in _quality_during_training(result)
    out = scalars(result)
    assert out["quality/recall"] == result["recall"]
    assert out["quality/coverage_class_mean"] == result["coverage_class_mean"]
    assert out["quality/density_class/b"] == result["density_per_class"]["b"]
    # too few samples: nothing logged
    assert not any(f"quality/{n}_class/c" in out for n in prdc.NAMES)
    without = {k: v for k, v in result.items() if k not in prdc.NAMES}
    assert "precision" not in summary_line(without) and "precision" not in _quality_during_training(
        without
    )


def test_the_compare_page_has_their_rows_only_when_the_runs_have_them():
    from acgan.quality.compare_page import _prdc_lines
    from acgan.quality.report_section import prdc_text
    from acgan.quality.verdict import PRDC_KEYS

    result = _result()
    row = {key: result[key] for key in PRDC_KEYS} | {"real_reference": result["real_reference"]}
    lines = _prdc_lines([row, dict(row, precision=None, precision_class_mean=None)])
    assert [name for name, _ in lines] == [
        "precision / recall / density / coverage (k-NN, k = 5)",
        "precision / recall / density / coverage, real vs real (reference)",
        "mean per-class precision / recall / density / coverage",
        "mean per-class, real vs real (reference)",
    ]
    assert [cell(row) for _, cell in lines] == [
        prdc_text(result),
        prdc_text(result["real_reference"]),
        prdc_text(result, "_class_mean"),
        prdc_text(result["real_reference"], "_class_mean"),
    ]
    assert lines[0][1](dict(row, precision=None)) == "n/a"
    assert _prdc_lines([{"precision": None}]) == []
