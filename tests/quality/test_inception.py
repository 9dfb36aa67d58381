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

from acgan.config import Config
from acgan.errors import UserError
from acgan.quality import inception, metrics
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
    entry = inception.scores(
        graph, shifted, real, "swatches", cache_dir=tmp_path, echo=lines.append
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
    same = inception.scores(graph, real, real, "cifar10", cache_dir=tmp_path, echo=again.append)
    assert (
        same["fid"] == pytest.approx(0.0, abs=1e-6)
        and len(list(tmp_path.glob("inception-real-*.npz"))) == 1
    )
    assert again == [
        "standard FID and Inception score: 60 generated images through the Inception graph"
    ]
    assert same["real_inception_score"] == entry["real_inception_score"]
    assert same["inception_score"] == pytest.approx(entry["real_inception_score"], rel=1e-9)
    assert same["note"].startswith("not the papers' protocol: 60 generated against 60 train images")
    assert inception.comparability("cifar10", 50_000, 50_000).startswith(
        "comparable with papers' CIFAR-10"
    )
    assert inception.comparability("cifar10", 50_000, 10_000).startswith("not the papers' protocol")
    # Images of another size: the graph resizes them itself.
    assert (
        inception.scores(
            graph,
            shifted[:, :20, :24],
            real,
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
    entry = inception.scores(graph, images, images, "cifar10", echo=lambda line: None)
    assert graph.weight.shape == (FEATURES, CLASSES)
    assert entry["inception_score"] == pytest.approx(1.0) and entry[
        "inception_score_std"
    ] == pytest.approx(0.0)


def test_moments_merged_batch_by_batch_are_the_mean_and_covariance():
    x = np.random.default_rng(2).normal(1000.0, 0.5, (103, 7))  # a large mean: no cancellation
    moments = metrics.Moments()
    for i in range(0, 103, 10):
        moments.add(x[i : i + 10])
    assert moments.count == 103
    np.testing.assert_allclose(moments.mean, x.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(moments.covariance(), np.cov(x, rowvar=False), rtol=1e-9, atol=1e-12)


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
    (tmp_path / "hostile.pb").write_bytes(with_op("WriteFile", "control").SerializeToString())
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
        (
            ["--run", rgb, "--inception", tmp_path / "hostile.pb"],
            f"--inception {tmp_path / 'hostile.pb'} is refused: its node leak runs the op WriteFile",
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
