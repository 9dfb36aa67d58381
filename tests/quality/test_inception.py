"""The standard FID and Inception score (acgan.evaluate --inception): the recipe on a small graph with the
2015 Inception graph's node names and quirks (tests/inception_graph.py), the one-line errors for a wrong
file, and the notes of an evaluation without it. The CLI path runs in tests/test_train_cli.py, on the
acgan_cifar swatches run there."""

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import acgan
from acgan.config import Config
from acgan.data.image_set import ImageSet
from acgan.errors import UserError
from acgan.quality import inception, inception_stats, metrics
from api_runs import ROOT, child_env
from inception_graph import (
    CLASSES,
    FEATURES,
    constant,
    features_one_at_a_time,
    graph_def,
    with_op,
    write_graph,
)


def _softmax(logits):
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def _train_set(images, classes=3):
    """An ImageSet of `images`, labelled 0, 1, ..., classes - 1, 0, 1, ... as sample_inputs labels."""
    labels = (np.arange(len(images)) % classes).astype(np.int32)
    return ImageSet(images, labels, tuple("abcdefghij"[:classes]))


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory):
    return write_graph(tmp_path_factory.mktemp("inception") / inception.GRAPH_FILE)


def test_the_standard_fid_and_inception_score_follow_the_recipe(graph_file, tmp_path, monkeypatch):
    """Batches of any size through the graph give the features the graph gives one image at a time; the
    FID is the Fréchet distance of those features, the Inception score that of softmax(pool_3 @ W) over 10
    splits (no bias), each beside its sizes; the real side is cached."""
    monkeypatch.setattr(inception, "BATCH", 16)  # 60 images: three full batches and one of 12
    rng = np.random.default_rng(0)
    real = rng.integers(0, 256, (60, 32, 32, 3), dtype=np.uint8)
    shifted = np.clip(real.astype(np.int64) + 40, 0, 255).astype(np.uint8)
    graph = inception.read_graph(graph_file.parent)  # a folder: its classify_image_graph_def.pb
    assert (
        graph.path == graph_file
        and graph.sha256 == hashlib.sha256(graph_file.read_bytes()).hexdigest()
    )
    np.testing.assert_allclose(
        graph.features_of(real), features_one_at_a_time(graph_file, real), rtol=1e-5, atol=1e-6
    )
    lines = []
    train_set = _train_set(real)
    entry = inception.scores(
        graph,
        shifted,
        train_set.labels,
        train_set,
        "swatches",
        cache_dir=tmp_path,
        echo=lines.append,
    )
    features_real, features_shifted = (
        features_one_at_a_time(graph_file, x) for x in (real, shifted)
    )
    expected = metrics.frechet_distance_of(features_shifted, features_real)
    assert expected > 0.1 and entry["fid"] == pytest.approx(expected, rel=1e-5)
    weight = constant(graph_def(), "softmax/weights").astype(np.float64)
    assert (entry["inception_score"], entry["inception_score_std"]) == pytest.approx(
        metrics.inception_score(_softmax(features_shifted @ weight), 10), rel=1e-5
    )
    with_bias = metrics.inception_score(
        _softmax(features_shifted @ weight + constant(graph_def(), "softmax/biases"))
    )
    # the improved-GAN recipe leaves the bias out
    assert abs(with_bias[0] - entry["inception_score"]) > 1e-3
    assert (entry["real_inception_score"], entry["real_inception_score_std"]) == pytest.approx(
        metrics.inception_score(_softmax(features_real @ weight), 10), rel=1e-5
    )
    assert entry["num_generated"] == entry["num_real"] == 60 and entry["splits"] == 10
    assert (
        entry["feature_dim"] == FEATURES
        and entry["graph"] == str(graph_file)
        and entry["sha256"] == graph.sha256
    )
    assert (
        "comparable only with other runs on it" in entry["note"] and "cifar10" not in entry["note"]
    )
    assert lines[0].startswith(
        "standard FID: 60 real train images through the Inception graph (once: cached in "
    )
    # Against itself: 0. The real side now comes from the cache (no line about it), with the same numbers.
    again = []
    same = inception.scores(
        graph, real, train_set.labels, train_set, "cifar10", cache_dir=tmp_path, echo=again.append
    )
    assert (
        same["fid"] == pytest.approx(0.0, abs=1e-6)
        and len(list(tmp_path.glob("inception-real-*.npz"))) == 1
    )
    assert again == [
        "standard FID and Inception score: 60 generated images through the Inception graph"
    ]
    assert same["real_inception_score"] == entry["real_inception_score"]
    assert same["inception_score"] == pytest.approx(entry["real_inception_score"], rel=1e-9)
    assert same["note"].startswith(
        "not the papers' protocol: 60 generated and 60 real train images (a train set cut by "
        "--max_per_class or --classes), where papers take 50,000 generated against all 50,000"
    )
    # Images of another size: the graph resizes them itself.
    assert (
        inception.scores(
            graph,
            shifted[:, :20, :24],
            train_set.labels,
            train_set,
            "swatches",
            cache_dir=tmp_path,
            echo=lambda line: None,
        )["fid"]
        > 0
    )


def test_the_inception_score_runs_from_1_to_the_number_of_classes(tmp_path):
    k = 12
    assert metrics.inception_score(np.full((1000, k), 1.0 / k)) == pytest.approx((1.0, 0.0))
    # each of the 10 splits: 10 images of every class
    one_hot_balanced = np.eye(k)[np.arange(1200) % k]
    assert metrics.inception_score(one_hot_balanced, 10) == pytest.approx((k, 0.0))
    with pytest.raises(ValueError, match="9 samples cannot make 10 splits"):
        metrics.inception_score(one_hot_balanced[:9])
    # Through a graph whose logits weight is 0: every softmax uniform over its classes, a score of 1.
    graph = inception.read_graph(write_graph(tmp_path / "flat.pb", weight_scale=0.0))
    images = np.random.default_rng(1).integers(0, 256, (20, 16, 16, 3), dtype=np.uint8)
    train_set = _train_set(images)
    entry = inception.scores(
        graph, images, train_set.labels, train_set, "cifar10", tmp_path, echo=lambda line: None
    )
    assert graph.weight.shape == (FEATURES, CLASSES)
    assert entry["inception_score"] == pytest.approx(1.0) and entry[
        "inception_score_std"
    ] == pytest.approx(0.0)


def test_moments_merged_batch_by_batch_are_the_mean_and_covariance():
    x = np.random.default_rng(2).normal(1000.0, 0.5, (103, 7))  # a large mean: no cancellation
    mean, covariance = metrics.moments(x, chunk=10)
    np.testing.assert_allclose(mean, x.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(covariance, np.cov(x, rowvar=False), rtol=1e-9, atol=1e-12)


def test_a_missing_wrong_or_incomplete_graph_file_is_a_one_line_error(graph_file, tmp_path):
    cases = {
        "missing.pb": None,
        "text.pb": b"not a graph\n",
        "archive.tgz": b"\x1f\x8b\x08\x00rest",
        "other.pb": write_graph(
            tmp_path / "x.pb", rename=("pool_3", "softmax/logits/MatMul")
        ).read_bytes(),
    }
    messages = {}
    for name, data in cases.items():
        if data is not None:
            (tmp_path / name).write_bytes(data)
        with pytest.raises(UserError) as error:
            inception.read_graph(tmp_path / name)
        messages[name] = str(error.value)
        assert "\n" not in messages[name]
    assert messages["missing.pb"].startswith(
        f"--inception {tmp_path / 'missing.pb'} does not exist: download"
    )
    assert inception.ARCHIVE_URL in messages["missing.pb"]
    assert messages["text.pb"] == (
        f"--inception {tmp_path / 'text.pb'} is not a TensorFlow GraphDef: give "
        f"classify_image_graph_def.pb, unpacked from {inception.ARCHIVE_URL}"
    )
    assert messages["archive.tgz"].endswith(
        "is a gzip archive: unpack classify_image_graph_def.pb from it first "
        f"(tar xzf {tmp_path / 'archive.tgz'} classify_image_graph_def.pb)"
    )
    assert messages["other.pb"].startswith(
        f"--inception {tmp_path / 'other.pb'} is a GraphDef without pool_3, "
        "softmax/logits/MatMul: not the 2015-12-05 Inception graph"
    )
    with pytest.raises(UserError, match="classify_image_graph_def.pb does not exist"):
        inception.read_graph(tmp_path)  # a folder without the file


def _fake_run(folder, dataset, image_shape):
    """A run folder's config.json and dataset.json, no checkpoint: what --inception is checked against."""
    folder.mkdir()
    (folder / "config.json").write_text(Config(dataset=dataset).to_json())
    (folder / "dataset.json").write_text(
        json.dumps({"class_names": list("abcdefghij"), "image_shape": image_shape})
    )
    return folder


@pytest.mark.slow
def test_evaluate_refuses_a_wrong_inception_setting_in_one_line_before_anything_runs(
    graph_file, tmp_path
):
    rgb = _fake_run(tmp_path / "rgb", "swatches", [32, 32, 3])
    grey = _fake_run(tmp_path / "grey", "doodles", [28, 28, 1])
    (tmp_path / "text.pb").write_text("not a graph\n")
    cases = [
        (
            ["--run", rgb, "--inception", tmp_path / "missing.pb"],
            f"--inception {tmp_path / 'missing.pb'} does not "
            "exist: download the Inception graph once",
        ),
        (
            ["--run", rgb, "--inception", tmp_path / "text.pb"],
            f"--inception {tmp_path / 'text.pb'} is not a "
            "TensorFlow GraphDef: give classify_image_graph_def.pb",
        ),
        (
            ["--run", grey, "--inception", graph_file],
            "--inception needs RGB images: doodles's are 28x28x1",
        ),
        (
            ["--run", rgb, "--inception", graph_file, "--backend", "jax"],
            "--inception runs the Inception graph on TensorFlow, not jax: evaluate with --backend tensorflow",
        ),
        (
            ["--run", rgb, "--inception", graph_file, "--inception_samples", "9"],
            "--inception_samples must be at least 10 (the Inception score's splits), got 9",
        ),
    ]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "acgan.evaluate", *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
            cwd=ROOT,
        )
        for args, _ in cases
    ]
    for proc, (_, message) in zip(procs, cases):
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 2 and "Traceback" not in err, err[-2000:]
        assert err.strip().splitlines()[-1].startswith(f"error: {message}"), err[-2000:]
    assert sorted(os.listdir(rgb)) == ["config.json", "dataset.json"]  # nothing written


def test_evaluate_refuses_a_graph_of_other_ops_and_a_wrong_statistics_file_before_anything_loads(
    graph_file, tmp_path
):
    """In this process (the command turns the same UserError into its one line and exit 2): refused
    after the graph is read, before the checkpoint, the judge or the data load."""
    rgb = _fake_run(tmp_path / "rgb", "swatches", [32, 32, 3])
    (tmp_path / "hostile.pb").write_bytes(with_op("WriteFile", "control").SerializeToString())
    np.savez(tmp_path / "small.npz", mu=np.zeros(8), sigma=np.eye(8))
    with pytest.raises(
        UserError, match="hostile.pb is refused: its node leak runs the op WriteFile"
    ):
        acgan.evaluate(run=rgb, inception=tmp_path / "hostile.pb")
    with pytest.raises(
        UserError, match=r"small.npz holds mu \[8\] and sigma \[8, 8\]: this graph's"
    ):
        acgan.evaluate(run=rgb, inception=graph_file, inception_stats=tmp_path / "small.npz")
    with pytest.raises(
        UserError, match="^--inception_stats needs --inception: they are statistics"
    ):
        acgan.evaluate(run=rgb, inception_stats=tmp_path / "small.npz")
    assert sorted(os.listdir(rgb)) == ["config.json", "dataset.json"]  # nothing written


def test_an_evaluation_without_the_graph_says_why_there_is_no_standard_fid():
    assert inception.unavailable("doodles", (28, 28, 1)) == {
        "fid": None,
        "note": "not applicable: the standard FID and Inception score are defined for RGB photographs, "
        "and doodles's images are 28x28x1",
    }
    assert inception.unavailable("cifar10", (32, 32, 3))["note"].startswith(
        "not computed: acgan.evaluate --inception PATH computes"
    )
    from acgan.quality.report_section import inception_rows

    assert inception_rows({"fid": None, "note": "not computed: x"}) == [
        ("FID and Inception score, standard", "not computed: x")
    ]


def _fid_by_brute_force(a, b):
    """|mu_a - mu_b|^2 + tr(S_a + S_b - 2 (S_a S_b)^(1/2)), the trace of the root from the eigenvalues of
    S_a S_b (real and non-negative for a product of two covariances): not metrics' symmetric form."""
    s_a, s_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    root_trace = np.sqrt(np.clip(np.linalg.eigvals(s_a @ s_b).real, 0, None)).sum()
    return np.sum((a.mean(0) - b.mean(0)) ** 2) + np.trace(s_a) + np.trace(s_b) - 2 * root_trace


def test_kid_and_the_per_class_fid_are_those_of_the_features_class_by_class(graph_file, tmp_path):
    """Three classes of 30 train images, each its own colour; the samples of class a are its train
    images in another order (FID 0), of b brighter, of c darker. The per-class FID (iFID) is each class's
    FID computed by brute force from the features the graph gives one image at a time, its mean their
    mean; KID is metrics.kernel_distance of the same features (checked term by term there)."""
    rng = np.random.default_rng(3)
    colours = np.array([[200, 40, 40], [40, 200, 40], [40, 40, 200]])
    labels = (np.arange(90) % 3).astype(np.int32)
    real = np.clip(colours[labels][:, None, None] + rng.normal(0, 25, (90, 8, 8, 3)), 0, 255)
    real = real.astype(np.uint8)
    fake = real.copy()
    fake[labels == 0] = real[labels == 0][::-1]
    fake[labels == 1] = np.clip(real[labels == 1].astype(int) + 50, 0, 255)
    fake[labels == 2] = real[labels == 2] // 2
    graph = inception.read_graph(graph_file)
    train_set = _train_set(real)
    entry = inception.scores(
        graph, fake, labels, train_set, "swatches", tmp_path, echo=lambda line: None, seed=4
    )
    f_real, f_fake = (features_one_at_a_time(graph_file, x) for x in (real, fake))
    expected = [_fid_by_brute_force(f_fake[labels == c], f_real[labels == c]) for c in range(3)]
    assert expected[0] == pytest.approx(0, abs=1e-6) and min(expected[1:]) > 0.1
    got = entry["fid_per_class"]
    assert list(got) == ["a", "b", "c"]
    assert list(got.values()) == pytest.approx(expected, rel=1e-4, abs=1e-5)
    assert entry["fid_class_mean"] == pytest.approx(np.mean(expected), rel=1e-4)
    assert entry["num_real_per_class"] == entry["num_generated_per_class"] == [30, 30, 30]
    kid = metrics.kernel_distance(f_real, f_fake, seed=4)
    assert entry["kernel_distance"]["mean"] == pytest.approx(kid["mean"], rel=1e-4)
    assert (
        entry["kernel_distance"]["subsets"] == 1 and entry["kernel_distance"]["subset_size"] == 90
    )
    from acgan.quality.evaluation import scalars
    from acgan.quality.report_section import inception_rows, inception_text, per_class_table

    tags = scalars({"inception": entry})
    assert tags["quality/inception_kernel_distance"] == entry["kernel_distance"]["mean"]
    assert tags["quality/inception_fid_class_mean"] == entry["fid_class_mean"]
    assert tags["quality/inception_fid_class/b"] == got["b"]
    rows = dict(inception_rows(entry))
    assert rows["kernel distance (KID), standard (pool_3)"].startswith(
        f"{kid['mean']:.4f} ± 0.0000 (unbiased, so it can read below 0; 1 subsets of 90 a side)"
    )
    assert rows["mean per-class FID (iFID), standard"].startswith(
        f"{entry['fid_class_mean']:.2f} (each class's generated images against its train images, "
        "per class below; 30-30 generated vs 30-30 real a class)"
    )
    assert f"KID {kid['mean']:.4f} ± 0.0000, mean per-class FID (iFID) " in inception_text(entry)
    table = per_class_table(
        {"conditional_accuracy_per_class": {"a": 1.0, "b": 0.5, "c": 0.0}, "inception": entry}
    )
    assert table[0].endswith("| iFID, standard |") and table[3].endswith(f"| {got['b']:.2f} |")


def test_the_statistics_file_is_written_in_ttur_format_then_read_in_place_of_the_real_images(
    graph_file, tmp_path
):
    rng = np.random.default_rng(5)
    real = rng.integers(0, 256, (40, 8, 8, 3), dtype=np.uint8)
    fake = np.clip(real.astype(int) + 30, 0, 255).astype(np.uint8)
    graph, train_set, path = inception.read_graph(graph_file), _train_set(real), tmp_path / "s.npz"
    new = inception_stats.read_stats(path, FEATURES)
    assert new == {"path": path} and not path.exists()
    written = inception.scores(
        graph,
        fake,
        train_set.labels,
        train_set,
        "cifar10",
        tmp_path,
        stats=new,
        echo=lambda line: None,
    )
    features = features_one_at_a_time(graph_file, real)
    with np.load(path) as saved:
        assert sorted(saved.files) == ["mu", "sigma"]
        np.testing.assert_allclose(saved["mu"], features.mean(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(
            saved["sigma"], np.cov(features, rowvar=False), rtol=1e-4, atol=1e-6
        )
    sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
    assert written["real_statistics"] == {"file": str(path), "sha256": sha256, "read": False}
    assert written["kernel_distance"] and written["fid_class_mean"] is not None
    # Read back: the real images are not run again, and the FID is the same.
    lines = []
    read = inception.scores(
        graph,
        fake,
        train_set.labels,
        train_set,
        "cifar10",
        tmp_path,
        stats=inception_stats.read_stats(path, FEATURES),
        echo=lines.append,
    )
    assert lines == [
        "standard FID and Inception score: 40 generated images through the Inception graph"
    ]
    assert read["fid"] == pytest.approx(written["fid"], rel=1e-9)
    assert read["inception_score"] == written["inception_score"]
    assert read["real_statistics"] == {"file": str(path), "sha256": sha256, "read": True}
    assert read["num_real"] is None and read["real"] == f"the statistics in {path}"
    for key in inception.REAL_FEATURE_KEYS:
        assert read[key] is None, key
    assert read["note"].startswith("not the papers' protocol: 40 generated, where papers take")
    from acgan.quality.report_section import inception_rows, inception_text

    rows = dict(inception_rows(read))
    assert rows["real statistics (--inception_stats)"].startswith(
        f"read from `{path}` (sha256 {sha256}) as the FID's real side; KID, the per-class FID"
    )
    assert "kernel distance (KID), standard (pool_3)" not in rows
    assert f"(40 generated vs the statistics in {path})" in inception_text(read)
    assert inception.comparability("cifar10", 50_000, None, path) == (
        "comparable with papers' CIFAR-10 Inception score (50,000 generated), and their FID if "
        f"{path} holds the statistics of the 50,000 train images (TTUR's fid_stats_cifar10_train.npz "
        "does)"
    )


def test_the_note_says_papers_only_at_their_counts_and_otherwise_what_differs():
    assert inception.comparability("cifar10", 50_000, 50_000) == (
        "comparable with papers' CIFAR-10 FID and Inception score (50,000 generated against the "
        "50,000 train images)"
    )
    assert inception.comparability("cifar10", 50_000, 10_000).startswith(
        "not the papers' protocol: 10,000 real train images (a train set cut by --max_per_class or "
        "--classes), where papers take 50,000 generated against all 50,000 train images"
    )
    assert inception.comparability("cifar10", 10_000, 50_000).startswith(
        "not the papers' protocol: 10,000 generated, where"
    )
    assert inception.comparability("swatches", 50_000, 50_000).startswith(
        "on swatches, comparable only with other runs on it"
    )


def test_a_statistics_file_that_is_not_ttur_format_at_the_graphs_size_is_a_one_line_error(tmp_path):
    def npz(name, **arrays):
        np.savez(tmp_path / name, **arrays)
        return tmp_path / name

    (tmp_path / "text.npz").write_text("mu, sigma\n")
    (tmp_path / "blocker").write_text("a file, not a folder\n")
    eye = np.eye(FEATURES)
    cases = {
        tmp_path / "text.npz": "cannot be read as an .npz file (",
        npz("mu_only.npz", mu=np.zeros(FEATURES)): "has no sigma: the statistics file is TTUR's "
        "format, an .npz of mu (the mean of the real images' pool_3 features) and sigma",
        npz("small.npz", mu=np.zeros(8), sigma=np.eye(8)): "holds mu [8] and sigma [8, 8]: this "
        f"graph's pool_3 features are {FEATURES}-d, so mu [{FEATURES}] and sigma",
        npz(
            "flat.npz", mu=np.zeros(FEATURES), sigma=np.zeros(FEATURES)
        ): "holds mu [16] and sigma [16]",
        npz("nan.npz", mu=np.full(FEATURES, np.nan), sigma=eye): "holds values that are not finite",
        npz(
            "text_values.npz", mu=np.array(["x"] * FEATURES), sigma=eye
        ): "holds values that are not",
        tmp_path / "blocker" / "s.npz": "does not exist and cannot be written: "
        f"{tmp_path / 'blocker'} is not a writable folder",
    }
    for path, message in cases.items():
        with pytest.raises(UserError) as error:
            inception_stats.read_stats(path, FEATURES)
        assert str(error.value).startswith(f"--inception_stats {path} {message}"), str(error.value)
        assert "\n" not in str(error.value)
