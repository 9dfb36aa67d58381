"""Sample quality: the metrics against closed forms, the judge, a GAN that really learns, and acgan.compare."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from acgan.config import Config
from acgan.quality import evaluation, metrics
from conftest import JUDGE_PER_CLASS

PER_CLASS = JUDGE_PER_CLASS  # doodles: 5,000 train images (a quick judge and GAN), the full 5,000-image test split


# ---- metrics (numpy only) ----


def _closed_form_diagonal(mu1, a, mu2, b):
    return np.sum((mu1 - mu2) ** 2) + np.sum((np.sqrt(a) - np.sqrt(b)) ** 2)


def test_frechet_distance_matches_the_closed_form_for_diagonal_covariances():
    rng = np.random.default_rng(0)
    mu1, mu2 = rng.normal(size=16), rng.normal(size=16)
    a, b = rng.uniform(0.1, 4.0, 16), rng.uniform(0.1, 4.0, 16)
    expected = _closed_form_diagonal(mu1, a, mu2, b)
    assert metrics.frechet_distance(mu1, np.diag(a), mu2, np.diag(b)) == pytest.approx(
        expected, rel=1e-9
    )
    # Rotating both covariances by one orthogonal matrix keeps them commuting: the same closed form.
    q, _ = np.linalg.qr(rng.normal(size=(16, 16)))
    s1, s2 = q @ np.diag(a) @ q.T, q @ np.diag(b) @ q.T
    assert metrics.frechet_distance(mu1, s1, mu2, s2) == pytest.approx(expected, rel=1e-8)
    # In one dimension it is (m1 - m2)^2 + (s1 - s2)^2 with s the standard deviations.
    assert metrics.frechet_distance([1.0], [[4.0]], [3.0], [[9.0]]) == pytest.approx(4.0 + 1.0)


def test_frechet_distance_is_symmetric_and_zero_for_identical_gaussians():
    rng = np.random.default_rng(1)
    m = rng.normal(size=(8, 8))
    s1, s2 = m @ m.T, np.cov(rng.normal(size=(50, 8)), rowvar=False)  # general, non-commuting
    mu = rng.normal(size=8)
    assert metrics.frechet_distance(mu, s1, mu, s2) == pytest.approx(
        metrics.frechet_distance(mu, s2, mu, s1)
    )
    assert metrics.frechet_distance(mu, s1, mu, s1) == pytest.approx(0.0, abs=1e-8)
    # ReLU features give rank-deficient covariances
    singular = np.diag([1.0, 0.0, 2.0, 0.0, 0, 0, 0, 0])
    assert metrics.frechet_distance(mu, singular, mu, singular) == pytest.approx(0.0, abs=1e-8)


def test_frechet_distance_of_samples_estimates_the_gaussians_distance():
    rng = np.random.default_rng(2)
    a, b = rng.uniform(0.5, 2.0, 4), rng.uniform(0.5, 2.0, 4)
    mu1, mu2 = np.zeros(4), np.full(4, 0.5)
    x = rng.normal(mu1, np.sqrt(a), size=(40_000, 4))
    y = rng.normal(mu2, np.sqrt(b), size=(40_000, 4))
    expected = _closed_form_diagonal(mu1, a, mu2, b)
    assert metrics.frechet_distance_of(x, y) == pytest.approx(expected, abs=0.03)
    assert metrics.frechet_distance_of(x, x) == pytest.approx(0.0, abs=1e-6)
    assert metrics.frechet_distance_of(x[:20_000], x[20_000:]) < 0.01


def test_classifier_score_runs_from_1_to_k():
    k = 10
    assert metrics.classifier_score(np.full((100, k), 1.0 / k)) == pytest.approx(1.0)
    one_hot_balanced = np.eye(k)[np.arange(100) % k]
    assert metrics.classifier_score(one_hot_balanced) == pytest.approx(k, rel=1e-6)
    # confident, one class
    assert metrics.classifier_score(np.eye(k)[np.zeros(100, int)]) == pytest.approx(1.0)


def test_conditional_accuracy_overall_and_per_class():
    probs = np.eye(3)[[0, 1, 1, 2, 0, 0]]
    overall, per_class = metrics.conditional_accuracy(probs, np.array([0, 1, 2, 2, 1, 0]))
    assert overall == pytest.approx(4 / 6)
    assert per_class == pytest.approx([1.0, 0.5, 0.5])


def test_real_subset_and_sample_inputs_are_fixed_by_the_seed():
    from acgan.data import ImageSet

    images = np.arange(30 * 4, dtype=np.uint8).reshape(30, 2, 2, 1)
    data = ImageSet(images, (np.arange(30) % 3).astype(np.int32), ("a", "b", "c"))
    assert metrics.real_subset(data, 50)[0] is images  # fewer than asked: all of it
    first, again, other = (metrics.real_subset(data, 10, s)[0] for s in (0, 0, 1))
    assert len(first) == 10 and np.array_equal(first, again) and not np.array_equal(first, other)
    z, labels = evaluation.sample_inputs(3, 62, 10, seed=0)
    assert (
        z.shape == (10, 62) and np.abs(z).max() <= 1 and np.bincount(labels).tolist() == [4, 3, 3]
    )


# ---- the judge ----


@pytest.fixture(scope="module")
def data_dir(judged_data_dir):
    return judged_data_dir  # the doodles, with the judge (conftest's `judge`) cached in it


@pytest.fixture(scope="module")
def test_set(data_dir):
    from acgan.data import load_dataset

    return load_dataset("doodles", split="test", data_dir=str(data_dir), max_per_class=PER_CLASS)


@pytest.mark.slow
def test_judge_is_accurate_cached_and_float32_under_a_mixed_policy(
    judge, data_dir, test_set, set_policy
):
    from acgan.quality import judge as judge_lib

    assert judge.info["test_accuracy"] >= 0.97
    assert judge.info["num_train"] == 10 * PER_CLASS and judge.info["num_test"] == len(test_set)
    set_policy("mixed_float16")
    lines = []
    cached = judge_lib.load_or_train(
        "doodles",
        data_dir=str(data_dir),
        max_per_class=PER_CLASS,
        test_set=test_set,
        echo=lines.append,
    )
    assert lines == []  # loaded, not retrained
    assert cached.info["test_accuracy"] == judge.info["test_accuracy"]
    assert {layer.dtype_policy.name for layer in cached.classifier.layers} == {"float32"}
    assert {layer.dtype_policy.name for layer in judge_lib.build_model((28, 28, 1), 10).layers} == {
        "float32"
    }
    assert np.allclose(
        cached.predict(test_set.images[:50])[1], judge.predict(test_set.images[:50])[1], atol=1e-5
    )
    # Another class selection, cap or dataset gets its own judge.
    assert (
        judge_lib.cache_key("doodles", None, 100, test_set)[0]
        != judge_lib.cache_key("doodles", None, PER_CLASS, test_set)[0]
    )


@pytest.mark.slow
def test_conditional_accuracy_of_real_images_is_the_judges_and_of_noise_is_chance(judge, test_set):
    features, probs = judge.predict(test_set.images)
    assert features.shape == (len(test_set), 128)
    accuracy, per_class = metrics.conditional_accuracy(probs, test_set.labels)
    assert accuracy == pytest.approx(judge.info["test_accuracy"], abs=1e-9)
    assert min(per_class) > 0.9
    noise = np.random.default_rng(0).integers(0, 256, (2000, 28, 28, 1), dtype=np.uint8)
    labels = (np.arange(2000) % 10).astype(np.int32)
    assert metrics.conditional_accuracy(judge.predict(noise)[1], labels)[0] == pytest.approx(
        0.1, abs=0.03
    )
    # Real vs real in the judge's features: two random halves of the test split are close, noise is far.
    order = np.random.default_rng(0).permutation(len(features))
    halves = metrics.frechet_distance_of(features[order[::2]], features[order[1::2]])
    assert halves < 0.02 * metrics.frechet_distance_of(features, judge.predict(noise)[0])
    assert metrics.classifier_score(probs) > 9.0


# ---- the CLIs ----


def _run(module, *args, cwd=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
    )


@pytest.fixture(scope="module")
def comparison(judge, data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("compare") / "cmp"
    result = _run(
        "acgan.compare",
        "--policies",
        "float32,mixed_bfloat16",
        "--steps",
        "8",
        "--batch",
        "16",
        "--width",
        "0.125",
        "--no-jit",
        "--num_samples",
        "200",
        "--max_per_class",
        str(PER_CLASS),
        "--data_dir",
        str(data_dir),
        "--price_per_hour",
        "0.54",
        "--judges",
        "2",
        "--seeds",
        "2",
        "--cas",
        "--parallel",
        "2",
        "--output_dir",
        str(out),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.mark.slow
def test_compare_writes_its_page_and_figure(comparison):
    page = (comparison / "compare.md").read_text()
    assert (
        "| | float32 | mixed_bfloat16 |" in page
        and "conditional accuracy" in page
        and "compare.png" in page
    )
    assert "200 real test images vs 200 generated" in page
    assert "Fréchet distance, real vs real (reference)" in page and "| quality held |" in page
    assert "200 real test images and 200 real train images" in page
    doc = json.loads((comparison / "compare.json").read_text())
    assert [r["policy"] for r in doc["rows"]] == ["float32", "mixed_bfloat16"]
    assert all(r["steps"] == 8 and r["cost_per_million_batches"] > 0 for r in doc["rows"])
    reference = doc["rows"][0]["real_reference"]
    assert (
        reference["num_real"] == reference["num_train"] == 200 and reference["frechet_distance"] > 0
    )
    assert all(r["quality_held"] == (r["accuracy_held"] and r["frechet_held"]) for r in doc["rows"])
    # --judges 2: each run judged again by seed 1's judge, the accuracy change vs float32 under each judge.
    base, other = doc["rows"]
    for row in doc["rows"]:
        assert [j["seed"] for j in row["across_judges"]["judges"]] == [0, 1]
        assert (
            row["across_judges"]["judges"][0]["conditional_accuracy"] == row["conditional_accuracy"]
        )
    changes = other["accuracy_change_across_judges"]
    assert changes[0] == pytest.approx(other["accuracy_change"]) and base[
        "accuracy_change_across_judges"
    ] == [0, 0]
    assert changes[1] == pytest.approx(
        other["across_judges"]["judges"][1]["conditional_accuracy"]
        - base["across_judges"]["judges"][1]["conditional_accuracy"]
    )
    assert (
        "| accuracy across 2 judges (min-max) |" in page
        and "| change vs float32 under each judge |" in page
    )
    assert "Judged again by judges of other seeds" in page and "of 2 judges" in page
    # --seeds 2: every policy trained again at seed 1 (its own folder); the row holds the means, the verdict
    # says how each seed's pair came out.
    for row in doc["rows"]:
        runs = row["across_seeds"]["runs"]
        assert [r["seed"] for r in runs] == [0, 1] and runs[0]["run_dir"] == row["run_dir"]
        assert row["conditional_accuracy"] == pytest.approx(
            sum(r["conditional_accuracy"] for r in runs) / 2
        )
        assert json.loads((Path(runs[1]["run_dir"]) / "config.json").read_text())["seed"] == 1
    assert Path(base["across_seeds"]["runs"][1]["run_dir"]) == comparison / "float32-seed1"
    assert other["conditional_accuracy_change_across_seeds"] == pytest.approx(
        [
            a["conditional_accuracy"] - b["conditional_accuracy"]
            for a, b in zip(other["across_seeds"]["runs"], base["across_seeds"]["runs"])
        ]
    )
    assert (
        "| accuracy at each of 2 seeds |" in page and "| change vs float32 at each seed |" in page
    )
    assert "The verdict is on the means over 2 training seeds" in page and "of 2 seeds" in page
    # the seeds' changes as a mean and its standard error
    paired = other["conditional_accuracy_change_paired"]
    assert paired["pairs"] == 2 and paired["mean"] == pytest.approx(other["accuracy_change"])
    assert (
        "over the seed pairs (mean ± standard error) | baseline |" in page
        and "Paired over the 2 seeds" in page
    )
    assert "Runs trained 2 at a time" in page and "shared-machine figures" in page  # --parallel 2
    # --cas: each run's classification accuracy score and its real reference, means over the seeds.
    for row in doc["rows"]:
        scores = [
            json.loads((Path(r["run_dir"]) / "quality.json").read_text())[
                "classification_accuracy_score"
            ]
            for r in row["across_seeds"]["runs"]
        ]
        assert row["classification_accuracy_score"] == pytest.approx(
            np.mean([c["accuracy"] for c in scores])
        )
        assert row["classification_accuracy_score_real"] == pytest.approx(
            np.mean([c["real_reference"]["accuracy"] for c in scores])
        )
    assert (
        "| classification accuracy score (CAS) |" in page
        and "| CAS, real train images instead (reference) |" in page
    )
    # Precision, recall, density and coverage (k = 5; about 20 images a class on each side): each row's are the
    # means over its seeds' runs, beside the first seed's real-vs-real reference.
    from acgan.quality.report_section import prdc_text

    for row in doc["rows"]:
        saved = [
            json.loads((Path(r["run_dir"]) / "quality.json").read_text())
            for r in row["across_seeds"]["runs"]
        ]
        for key in (
            "precision",
            "recall",
            "density",
            "coverage",
            "precision_class_mean",
            "coverage_class_mean",
        ):
            assert row[key] == pytest.approx(np.mean([q[key] for q in saved]))
        assert (
            row["prdc_nearest_k"] == 5
            and row["real_reference"]["recall"] == saved[0]["real_reference"]["recall"]
        )
    assert (
        f"| precision / recall / density / coverage (k-NN, k = 5) | {prdc_text(base)} | {prdc_text(other)} |"
        in page
    )
    assert (
        f"| precision / recall / density / coverage, real vs real (reference) | "
        f"{prdc_text(base['real_reference'])} | {prdc_text(other['real_reference'])} |"
    ) in page
    assert (
        f"| mean per-class precision / recall / density / coverage | {prdc_text(base, '_class_mean')} |"
        in page
    )
    assert "Kynkäänniemi et al. 2019" in page
    for policy in ("float32", "mixed_bfloat16"):
        run = json.loads((comparison / policy / "report.json").read_text())
        assert (
            run["config"]["policy"] == policy and run["config"]["jit"] is False and "quality" in run
        )
        assert (comparison / policy / "train.log").exists()
    figure = Image.open(comparison / "compare.png")
    assert figure.width > figure.height  # two grids side by side


@pytest.mark.slow
def test_evaluate_cli_writes_quality_into_the_run(comparison, data_dir):
    run_dir = comparison / "float32"
    result = _run(
        "acgan.evaluate",
        "--run",
        str(run_dir),
        "--num_samples",
        "100",
        "--data_dir",
        str(data_dir),
        "--cas",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "conditional accuracy" in result.stdout
    saved = json.loads((run_dir / "quality.json").read_text())
    assert saved["num_generated"] == 100 and saved["step"] == 8 and "evaluate" in saved["command"]
    # --cas: a classifier trained on the 100 samples, one on 100 real train images, both on the test split.
    score = saved["classification_accuracy_score"]
    assert (
        score["num_train"] == score["real_reference"]["num_train"] == 100
        and score["num_test"] == 10 * PER_CLASS
    )
    # 10 real images per class
    assert 0 <= score["accuracy"] <= 1 and score["real_reference"]["accuracy"] > 0.5
    assert (
        f"classification accuracy score {score['accuracy']:.1%} (real train images instead: "
        in result.stdout
    )
    scalars = evaluation.scalars(saved)
    assert scalars["quality/classification_accuracy_score"] == score["accuracy"]
    # KID in the judge's features: 100 a side, so one subset of the whole of both (metrics.kernel_distance).
    kid = saved["kernel_distance"]
    assert (kid["subsets"], kid["subset_size"], kid["std"]) == (1, 100, 0) and np.isfinite(
        kid["mean"]
    )
    assert scalars["quality/kernel_distance"] == kid["mean"]
    name = next(iter(score["per_class"]))
    assert (
        scalars[f"quality/classification_accuracy_score_class/{name}"] == score["per_class"][name]
    )
    report = (run_dir / "report.md").read_text()
    assert "| classification accuracy score (CAS) |" in report and "| CAS | CAS, real |" in report
    assert (
        f"| kernel distance (KID), judge features | {kid['mean']:.4f} ± 0.0000 (unbiased" in report
    )
    assert (run_dir / "report.md").read_text().count(
        "## Sample quality"
    ) == 1  # replaced, not appended twice
    # Precision, recall, density and coverage (k = 5): 100 samples, 10 a class, against 100 real test images.
    from acgan.quality.report_section import _class_prdc_text, prdc_text

    reference = saved["real_reference"]
    assert saved["prdc_nearest_k"] == 5 and reference["num_train"] == 100
    assert all(
        0 <= saved[k] <= 1 and 0 <= reference[k] <= 1 for k in ("precision", "recall", "coverage")
    )
    # 8 steps of a tiny GAN: far from covering the real images
    assert saved["coverage"] < reference["coverage"]
    assert (
        f"precision / recall / density / coverage {prdc_text(saved)} (real vs real {prdc_text(reference)}; "
        "k = 5)"
    ) in result.stdout
    assert (
        f"| {prdc_text(saved)} (100 real test images vs 100 generated; real vs real (reference): "
        f"{prdc_text(reference)}):"
    ) in report
    assert (
        f"| mean per-class precision / recall / density / coverage (k-NN, k = 5, judge features) | "
        f"{prdc_text(saved, '_class_mean')} ("
    ) in report
    name = next(n for n, v in saved["recall_per_class"].items() if v is not None)
    assert f"| {_class_prdc_text(saved, name)} |" in report
    assert scalars["quality/coverage"] == saved["coverage"]
    assert scalars[f"quality/recall_class/{name}"] == saved["recall_per_class"][name]
    assert 'Sample quality" section of' in result.stdout


@pytest.mark.slow
def test_evaluate_cli_says_so_when_the_run_has_no_report_yet(comparison, data_dir, tmp_path):
    """A run killed before its report (or still training) has no report.md to write into: say so."""
    run_dir = tmp_path / "killed"
    shutil.copytree(
        comparison / "float32", run_dir, ignore=shutil.ignore_patterns("report.*", "quality.json")
    )
    result = _run(
        "acgan.evaluate", "--run", str(run_dir), "--num_samples", "100", "--data_dir", str(data_dir)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "no report.md" in result.stdout and not (run_dir / "report.md").exists()
    assert json.loads((run_dir / "quality.json").read_text())["num_generated"] == 100


@pytest.mark.parametrize(
    "args, message",
    [
        (["--policies", "float32"], "exactly one of --steps"),
        (["--steps", "5", "--minutes", "1"], "exactly one of --steps"),
        (["--steps", "5", "--policies", "float32,float8"], "unknown policy 'float8'"),
        (["--steps", "5", "--policies", "float32,float32"], "twice"),
        (["--steps", "5", "--batch", "0"], "--batch must be a positive integer"),
        (["--steps", "5", "--judges", "0"], "--judges must be an integer of at least 1"),
        (["--steps", "5", "--seeds", "0"], "--seeds must be an integer of at least 1"),
        (["--steps", "5", "--parallel", "0"], "--parallel must be an integer of at least 1"),
        (["--steps", "5", "--dataset", "mnist"], "unknown dataset"),
    ],
)
def test_compare_flag_errors_are_one_line_and_exit_2(args, message, tmp_path):
    result = _run("acgan.compare", "--output_dir", str(tmp_path / "cmp"), *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and message in last and "Traceback" not in result.stderr
    assert not (tmp_path / "cmp").exists()


@pytest.mark.slow
def test_compare_names_the_policy_and_log_when_training_fails(tmp_path, data_dir):
    # 10 images (1 per class) cannot fill a batch of 16: the training process exits with an error.
    result = _run(
        "acgan.compare",
        "--steps",
        "2",
        "--batch",
        "16",
        "--max_per_class",
        "1",
        "--width",
        "0.125",
        "--data_dir",
        str(data_dir),
        "--output_dir",
        str(tmp_path / "cmp"),
    )
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    log = tmp_path / "cmp" / "float32" / "train.log"
    assert (
        "training under float32 failed" in last
        and str(log) in last
        and "larger than the dataset" in last
    )
    assert log.exists() and not (tmp_path / "cmp" / "compare.md").exists()


def test_evaluate_refuses_a_folder_without_a_run(tmp_path):
    result = _run("acgan.evaluate", "--run", str(tmp_path))
    assert result.returncode == 2 and "not a readable acgan run folder" in result.stderr


@pytest.mark.slow
def test_evaluate_judges_with_other_judge_seeds(comparison, data_dir):
    """--judge_seed N: a judge trained from another initialisation and order, cached beside seed 0's;
    --judges 2: the same samples judged again by the next seed's judge, the spread reported."""
    run_dir = comparison / "mixed_bfloat16"
    result = _run(
        "acgan.evaluate",
        "--run",
        str(run_dir),
        "--num_samples",
        "100",
        "--data_dir",
        str(data_dir),
        "--judge_seed",
        "1",
        "--judges",
        "2",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    saved = json.loads((run_dir / "quality.json").read_text())
    judge = saved["judge"]
    assert judge["seed"] == 1 and judge["test_accuracy"] > 0.9
    seed_0 = json.loads((comparison / "compare.json").read_text())["judge"]["path"]
    # both cached
    assert judge["path"] != seed_0 and Path(judge["path"]).exists() and Path(seed_0).exists()
    across = saved["across_judges"]
    assert [j["seed"] for j in across["judges"]] == [1, 2]
    first, second = across["judges"]
    # the headline is the first judge's
    assert first["conditional_accuracy"] == saved["conditional_accuracy"]
    assert first["frechet_distance"] == saved["frechet_distance"] and second["test_accuracy"] > 0.9
    for key in ("conditional_accuracy", "frechet_distance", "frechet_distance_class_mean"):
        values = [first[key], second[key]]
        assert across[key]["min"] == min(values) and across[key]["max"] == max(values)
        assert across[key]["mean"] == pytest.approx(sum(values) / 2)
    report = (run_dir / "report.md").read_text()
    assert (
        "CNN (seed 1)" in report and "| across 2 judges (seeds 1, 2; the same samples) |" in report
    )
    assert "across 2 judges: conditional accuracy" in result.stdout
    for flag, message in (
        ("--judge_seed", "--judge_seed must be non-negative, got -1"),
        ("--judges", "--judges must be at least 1, got -1"),
    ):
        bad = _run("acgan.evaluate", "--run", str(run_dir), flag, "-1")
        assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1] == f"error: {message}"


def test_compare_trains_at_most_parallel_runs_at_once_and_starts_none_after_a_failure(
    tmp_path, monkeypatch
):
    """--parallel 2: runs overlap two at a time, in run order; when one fails, the run beside it finishes
    and no queued run starts; the failure is the one raised."""
    from acgan.errors import UserError
    from acgan.quality import compare_page, compare_runs, comparison

    log = tmp_path / "events"
    # stands in for acgan.train: logs its start and end, sleeps between
    child = tmp_path / "child.py"
    child.write_text(
        "import json, pathlib, sys, time\n"
        "run = pathlib.Path(sys.argv[1])\n"
        "def note(kind):\n"
        "    with open(sys.argv[2], 'a') as log:\n"
        "        log.write(f'{kind} {run.name} {time.time()}\\n')\n"
        "note('start')\n"
        "if run.name == 'mixed_float16-seed1':\n"
        "    sys.exit(1)  # at once: the run beside it is still training, so no other run is due to start\n"
        "time.sleep(1.0); note('end')\n"
        "(run / 'report.json').write_text(json.dumps({'status': 'completed'}))\n"
    )
    monkeypatch.setattr(
        compare_runs,
        "train_command",
        lambda settings, policy, run_dir, seed=None: [
            sys.executable,
            str(child),
            str(run_dir),
            str(log),
        ],
    )
    settings = comparison.CompareSettings(
        base=Config(steps=5), seeds=3, parallel=2, output_dir=str(tmp_path / "cmp")
    )
    runs = settings.runs(tmp_path / "cmp")
    for _, _, run_dir in runs:
        run_dir.mkdir(parents=True)
    with pytest.raises(UserError, match="training under mixed_float16 failed"):
        compare_runs.train_all(
            settings, runs, tmp_path / "cmp", ["train"] * len(runs), echo=lambda *_: None
        )
    events = [line.split() for line in log.read_text().splitlines()]
    started = [name for kind, name, _ in events if kind == "start"]
    # seeds 0 and 1 of both policies (mixed_float16 at seed 1 fails); seed 2's runs never start
    assert sorted(started) == ["float32", "float32-seed1", "mixed_float16", "mixed_float16-seed1"]
    assert sorted(started[:2]) == ["float32", "mixed_float16"]  # seed 0's pair first
    running = peak = 0
    for kind, _, _ in sorted(
        events, key=lambda e: (float(e[2]), e[0] == "start")
    ):  # the failed run logs no end
        running += 1 if kind == "start" else -1
        peak = max(peak, running)
    assert peak == 2
    assert (
        tmp_path / "cmp" / "float32-seed1" / "report.json"
    ).exists()  # the run beside the failure finished
    # the page: under a budget of minutes, the steps a run reached depend on its neighbour too
    assert "the steps each reached" in compare_page._alone_text({"parallel": 2, "minutes": 20.0}, 1)
    assert "the steps each reached" not in compare_page._alone_text(
        {"parallel": 2, "minutes": None}, 1
    )


def test_compare_trains_every_run_with_its_loss_and_refuses_an_unknown_one(tmp_path):
    """Each run's child reads its Config from the file compare wrote (acgan.train --config)."""
    from acgan.errors import UserError
    from acgan.quality import compare_runs, comparison

    settings = comparison.CompareSettings(base=Config(steps=5, loss="hinge"))
    args = compare_runs.train_command(settings.validate(), "float32", tmp_path, seed=3)
    assert args[args.index("--output_dir") + 1] == str(tmp_path)
    config = Config.from_json(Path(args[args.index("--config") + 1]).read_text())
    assert config == dataclasses.replace(settings.train_config("float32"), seed=3)
    assert (config.loss, config.seed, config.policy, config.steps) == ("hinge", 3, "float32", 5)
    with pytest.raises(UserError, match="unknown loss 'wgan': choose auto, nonsaturating, hinge"):
        comparison.CompareSettings(base=Config(steps=5, loss="wgan")).validate()


def test_compare_resume_judges_finished_runs_resumes_stopped_ones_and_trains_missing_ones(
    tmp_path, monkeypatch
):
    """--resume: in the comparison's folder a finished run is left as it is, an interrupted one goes on with
    acgan.train --resume (its log appended to), a missing one trains; a run trained with other settings,
    or an unfinished one under --minutes, is a one-line error before anything trains."""
    from acgan.errors import UserError
    from acgan.quality import compare_page, compare_runs, comparison

    out = tmp_path / "cmp"
    child = tmp_path / "child.py"  # stands in for acgan.train: notes its arguments, writes a report
    child.write_text(
        "import json, pathlib, sys\n"
        "run = pathlib.Path(sys.argv[1])\n"
        "print(' '.join(sys.argv[2:]))\n"
        "(run / 'report.json').write_text(json.dumps({'status': 'completed'}))\n"
    )
    monkeypatch.setattr(
        compare_runs,
        "train_command",
        lambda settings, policy, run_dir, seed=None: [
            sys.executable,
            str(child),
            str(run_dir),
            f"seed={seed}",
        ],
    )
    settings = comparison.CompareSettings(
        base=Config(steps=5), seeds=2, output_dir=str(out), resume=True
    )
    runs = settings.runs(out)  # float32, mixed_float16, float32-seed1, mixed_float16-seed1

    def saved(run_dir, status=None, **changes):
        run_dir.mkdir(parents=True, exist_ok=True)
        policy, seed = (
            run_dir.name.split("-seed")[0],
            int(run_dir.name.split("-seed")[1]) if "-seed" in run_dir.name else 0,
        )
        # As acgan.train saves it: the preset resolved from the data's shape ("auto" -> reference for 28x28x1),
        # and the loss from the preset.
        config = dataclasses.replace(
            settings.train_config(policy),
            **{
                "seed": seed,
                "eval_every": 500,
                "arch": "reference",
                "loss": "nonsaturating",
                **changes,
            },
        )
        (run_dir / "config.json").write_text(config.to_json())
        (run_dir / "dataset.json").write_text(json.dumps({"image_shape": [28, 28, 1]}))
        if status:
            (run_dir / "report.json").write_text(json.dumps({"status": status}))
        (run_dir / "train.log").write_text("the first session\n")

    saved(runs[0][2], "completed")  # float32: finished (another --eval_every does not matter)
    saved(runs[1][2], "interrupted")  # mixed_float16: Ctrl-C'd
    saved(runs[3][2])  # mixed_float16-seed1: killed before its report
    # with --resume the folder is taken as it is
    assert compare_runs.prepare_output_dir(settings) == out
    assert compare_runs.run_states(settings, runs) == ["done", "resume", "train", "resume"]
    assert (
        compare_runs.run_states(dataclasses.replace(settings, resume=False), runs) == ["train"] * 4
    )
    seen = []
    compare_runs.train_all(
        settings, runs, out, echo=seen.append, states=compare_runs.run_states(settings, runs)
    )
    assert (runs[0][2] / "train.log").read_text() == "the first session\n"  # left as it was
    assert (
        "trained earlier (completed), judged as it is" in seen[0]
        and "resuming mixed_float16" in seen[1]
    )
    resumed = (runs[1][2] / "train.log").read_text()
    assert resumed.startswith("the first session\n") and "seed=0 --resume" in resumed
    assert "--resume" not in (runs[2][2] / "train.log").read_text()  # float32-seed1 trained afresh
    assert "seed=1 --resume" in (runs[3][2] / "train.log").read_text()
    # The page says which runs this command did not train (their times are from their own training).
    doc = {
        "settings": {"parallel": 1, "minutes": None, "policies": ["float32", "mixed_float16"]},
        "reused_runs": [str(runs[0][2])],
    }
    text = compare_page._training_text(doc, 2)
    assert (
        text.startswith("Each policy trained alone")
        and "The exception: 1 of the 4 runs were trained by an earlier" in text
    )
    doc["reused_runs"] *= 4
    assert compare_page._training_text(doc, 2).startswith(
        "Every run was trained by an earlier command in this folder"
    )
    # A run with other settings is named, with what differs; nothing trains.
    saved(runs[2][2], "completed", batch=32)
    with pytest.raises(
        UserError, match=r"float32-seed1 holds a run trained with --batch 32, not 64"
    ):
        compare_runs.run_states(settings, runs)
    saved(runs[2][2], "completed", arch="acgan_cifar")  # explicitly, where "auto" means reference
    with pytest.raises(
        UserError,
        match=r"float32-seed1 holds a run trained with --arch 'acgan_cifar', not 'reference'",
    ):
        compare_runs.run_states(settings, runs)
    # where "auto" means the reference preset's nonsaturating loss
    saved(runs[2][2], "completed", loss="hinge")
    with pytest.raises(
        UserError,
        match=r"float32-seed1 holds a run trained with --loss 'hinge', not 'nonsaturating'",
    ):
        compare_runs.run_states(settings, runs)
    # Under --minutes an unfinished run cannot rejoin (acgan.train's --minutes is per session).
    minutes = dataclasses.replace(
        settings, base=dataclasses.replace(settings.base, steps=None, minutes=1.0)
    )
    for run_dir in (r for _, _, r in runs):
        saved(run_dir, "completed", steps=None, minutes=1.0)
    saved(runs[1][2], "interrupted", steps=None, minutes=1.0)
    with pytest.raises(UserError, match="mixed_float16 stopped before the end of its 1 minutes"):
        compare_runs.run_states(minutes, runs)
    # The folder: refused without --resume (which the message names), required with it.
    with pytest.raises(
        UserError, match="already holds a comparison .* or go on with it with --resume"
    ):
        compare_runs.prepare_output_dir(dataclasses.replace(settings, resume=False))
    with pytest.raises(UserError, match="there is no comparison in .*nowhere to go on with"):
        compare_runs.prepare_output_dir(
            dataclasses.replace(settings, output_dir=str(tmp_path / "nowhere"))
        )
    with pytest.raises(UserError, match="--resume needs --output_dir"):
        comparison.CompareSettings(resume=True, base=Config(steps=5)).validate()


@pytest.mark.parametrize("saved_status, carries_on", [("diverged", True), ("completed", False)])
def test_compare_carries_on_past_a_diverged_policy_only(
    saved_status, carries_on, tmp_path, monkeypatch
):
    """acgan.train exits 3 when a run diverged; compare shows that run, but still stops on real failures."""
    from acgan.errors import UserError
    from acgan.quality import compare_runs, comparison

    run_dir = tmp_path / "mixed_float16"
    run_dir.mkdir()
    (run_dir / "report.json").write_text(json.dumps({"status": saved_status}))
    monkeypatch.setattr(
        compare_runs,
        "train_command",
        lambda settings, policy, run_dir, seed=None: [
            sys.executable,
            "-c",
            "import sys; sys.exit(3)",
        ],
    )
    settings = comparison.CompareSettings(base=Config(steps=5))
    if carries_on:
        seen = []
        compare_runs.train_policy(settings, "mixed_float16", run_dir, echo=seen.append)
        assert "diverged" in seen[0]
    else:
        with pytest.raises(UserError, match="training under mixed_float16 failed"):
            compare_runs.train_policy(settings, "mixed_float16", run_dir, echo=lambda *_: None)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_d_class_margins_read_ds_class_term_per_class_and_are_absent_without_one(
    policy, set_policy
):
    """acgan_cifar's projection head with its dense logit zeroed: D's logit for image x under label k is
    <E[k], features(x) summed over the 4x4 map's positions>, so the margins follow from the trunk's
    features and E in numpy; of two labels sharing one row of E, one cannot rank its own class's images
    above the other's. The images arrive shuffled; the reference model's head takes no labels: no
    margins."""
    import keras

    from acgan.model import networks
    from acgan.quality.evaluation import d_class_margins
    from acgan.quality.report_section import lowest_margin

    set_policy(policy)
    keras.utils.set_random_seed(0)
    models = networks.build_models((32, 32, 3), 4, width=0.125, arch="acgan_cifar")
    rng = np.random.default_rng(0)
    embedding = rng.normal(0, 1, (4, models.trunk.output.shape[-1] // 16)).astype(np.float32)
    embedding[2] = embedding[1]
    for variable in models.d_head.weights:
        variable.assign(
            embedding if "embedding" in variable.path else np.zeros(variable.shape, np.float32)
        )
    labels = rng.permutation(np.repeat(np.arange(4), 8)).astype(np.int32)
    images = rng.integers(0, 256, (32, 32, 32, 3), dtype=np.uint8) // (
        labels[:, None, None, None] + 1
    )

    names = ("a", "b", "c", "d")
    entries = d_class_margins(models, images, labels, names)
    margins = list(entries["d_class_margin_per_class"].values())
    nearest = [names.index(name) for name in entries["d_class_nearest"].values()]
    assert (
        list(entries["d_class_margin_per_class"]) == list(entries["d_class_nearest"]) == list(names)
    )
    order = np.argsort(labels, kind="stable")
    features = (
        np.asarray(
            np.asarray(
                models.trunk(images[order].astype(np.float32) / 255.0, training=False), np.float32
            ),
            np.float64,
        )
        .reshape(len(images), 16, -1)
        .sum(axis=1)
    )
    means = np.stack(
        [features[labels[order] == c].mean(axis=0) for c in range(4)]
    ) @ embedding.T.astype(np.float64)
    for k in range(4):  # label k: its own class's images against the other classes' images
        others = [c for c in range(4) if c != k]
        assert nearest[k] == others[int(np.argmax(means[others, k]))]
        assert margins[k] == pytest.approx(means[k, k] - means[others, k].max(), rel=1e-4, abs=1e-4)
    # Labels 1 and 2 share a row of E: under either, D scores classes 1 and 2 by the same vector, so one
    # of the two labels cannot rank its own class above the other's.
    assert min(margins[1], margins[2]) <= 1e-4

    assert entries["d_class_margin_mean"] == pytest.approx(float(np.mean(margins)), rel=1e-6)
    lowest = min(range(4), key=lambda c: margins[c])
    assert lowest_margin(entries).startswith(
        f"lowest: {'abcd'[lowest]} {margins[lowest]:+.2f} against "
    )
    reference = networks.build_models((28, 28, 1), 10, width=0.125)
    assert (
        d_class_margins(reference, np.zeros((4, 28, 28, 1), np.uint8), np.arange(4), range(10))
        == {}
    )
