"""Tests for acgan.data: every source offline (local HTTP server, tfds mock_data), plus the tf.data pipeline.

Sizes: the doodles' checks read the full splits users train on (2,000 and 500 a class), a copy of the ones
conftest.py's doodles_cache draws once per test process for every file that asks, not a drawing of this
file's own; everything else is a handful of images."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import os
import socket
import sys
import threading

import numpy as np
import pytest
from PIL import Image

from acgan.data import (
    DATASETS,
    QUICKDRAW_DEFAULT_CLASSES,
    ImageSet,
    cifar10,
    doodles,
    load_dataset,
    quickdraw,
    quickdraw_class_names,
    validate_dataset_name,
)
from acgan.data.batches import BatchPlan
from acgan.data.pipeline import training_batches
from acgan.errors import UserError


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


# ---------------------------------------------------------------- doodles


@pytest.fixture(scope="module")
def doodle_dir(tmp_path_factory, data_dir_with_doodles):
    """A data folder holding a copy of the session's doodles splits (conftest.py's doodles_cache, drawn by
    load_dataset once per test process: most processes draw them for other tests anyway), which the
    damaged-cache test may overwrite."""
    return str(data_dir_with_doodles(tmp_path_factory.mktemp("doodles")))


@pytest.fixture(scope="module")
def doodle_train(doodle_dir):
    return load_dataset("doodles", data_dir=doodle_dir)


@pytest.fixture(scope="module")
def doodle_test(doodle_dir):
    return load_dataset("doodles", split="test", data_dir=doodle_dir)


@pytest.mark.slow
def test_doodles_shapes_dtypes_and_balance(doodle_train, doodle_test):
    for data, per_class in ((doodle_train, 2000), (doodle_test, 500)):
        assert data.images.shape == (10 * per_class, 28, 28, 1) and data.images.dtype == np.uint8
        assert data.labels.shape == (10 * per_class,) and data.labels.dtype == np.int32
        assert data.class_names == doodles.CLASS_NAMES and data.num_classes == 10
        assert data.image_shape == (28, 28, 1) and len(data) == 10 * per_class
        assert np.bincount(data.labels).tolist() == [per_class] * 10
        flat = data.images.reshape(len(data), -1)
        assert flat.max(1).min() == 255  # every doodle has fully-inked stroke pixels
        assert (flat[:, 0] == 0).mean() > 0.99  # black background (corners)
        assert 0.08 < (flat > 0).mean() < 0.4  # strokes, not blobs
        assert (
            len(np.unique(data.images)) > 10
        )  # anti-aliased (4x box-downsampled: 17 levels), not binary


def test_doodles_deterministic_per_seed(doodle_train, doodle_dir, tmp_path):
    again, _ = doodles.DOODLES.generate(
        30, seed=0
    )  # images are drawn class-interleaved, so this is a prefix
    assert again.tobytes() == doodle_train.images[:300].tobytes()
    other, _ = doodles.DOODLES.generate(30, seed=1)
    assert not np.array_equal(other, again)
    # A capped load in a fresh data_dir (no cache) matches the capped view of the cached full split.
    capped = load_dataset("doodles", data_dir=str(tmp_path), max_per_class=30)
    assert capped.images.tobytes() == doodle_train.images[:300].tobytes()
    assert not os.path.exists(tmp_path / "doodles")  # only full splits are cached
    cached = load_dataset("doodles", data_dir=doodle_dir, max_per_class=30)
    assert cached.images.tobytes() == doodle_train.images[:300].tobytes()


def test_doodles_cache_is_written_atomically_and_survives_damage(doodle_dir, doodle_test):
    path = doodles.DOODLES.cache_path(doodle_dir, "test", 0)
    assert os.path.exists(path)
    assert not [f for f in os.listdir(os.path.dirname(path)) if f.endswith(".tmp")]
    with open(path, "wb") as f:
        f.write(b"garbage")
    reloaded = load_dataset("doodles", split="test", data_dir=doodle_dir)
    assert reloaded.images.tobytes() == doodle_test.images.tobytes()
    with np.load(path) as f:  # the damaged cache was rewritten
        assert f["images"].shape == doodle_test.images.shape


def test_doodles_train_and_test_do_not_overlap(doodle_train, doodle_test):
    train = {hashlib.sha1(x.tobytes()).digest() for x in doodle_train.images}
    test = {hashlib.sha1(x.tobytes()).digest() for x in doodle_test.images}
    assert not train & test


def test_doodles_classes_are_distinct(doodle_train, doodle_test):
    # Nearest class mean on raw pixels: measured ~0.88 overall, worst class (square) ~0.65; chance is 0.1.
    x = doodle_train.images.reshape(len(doodle_train), -1).astype(np.float32) / 255
    xt = doodle_test.images.reshape(len(doodle_test), -1).astype(np.float32) / 255
    means = np.stack([x[doodle_train.labels == c].mean(0) for c in range(10)])
    dist = (xt**2).sum(1)[:, None] - 2 * xt @ means.T + (means**2).sum(1)[None]
    pred = dist.argmin(1)
    assert (pred == doodle_test.labels).mean() >= 0.75
    per_class = [(pred[doodle_test.labels == c] == c).mean() for c in range(10)]
    assert min(per_class) >= 0.4, per_class


# ---------------------------------------------------------------- quickdraw


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.paths.append(self.path)
        if self.path.startswith("/short/"):  # promise 100 kB, send 100 bytes, hang up
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(b"\x93NUMPY" + b"0" * 94)
            return
        super().do_GET()


@pytest.fixture
def server(tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Handler, directory=str(served))
    )
    httpd.paths = []
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield httpd, f"http://127.0.0.1:{httpd.server_address[1]}", served
    httpd.shutdown()
    httpd.server_close()


QD_SIZES = {"airplane": 50, "alarm clock": 30, "bee": 20}


def _bitmaps(label: int, n: int) -> np.ndarray:
    rows = np.zeros((n, 784), np.uint8)
    rows[:, 0] = label + 1  # which class
    rows[:, 1] = np.arange(n)  # which row
    return rows


@pytest.fixture
def qd_server(server, monkeypatch):
    httpd, url, served = server
    for label, (name, n) in enumerate(QD_SIZES.items()):
        np.save(served / f"{name}.npy", _bitmaps(label, n))
    monkeypatch.setenv(quickdraw.URL_ENV, url)
    return httpd


def test_quickdraw_class_names():
    names = quickdraw_class_names()
    assert len(names) == 345 and len(set(names)) == 345
    assert "alarm clock" in names and set(QUICKDRAW_DEFAULT_CLASSES) <= set(names)


def test_quickdraw_unknown_class_suggests_close_matches():
    with pytest.raises(UserError, match="'aple'.*'apple'") as e:
        quickdraw.validate_classes(["airplane", "aple"])
    _one_line(e)
    with pytest.raises(UserError, match="banana-split"):
        validate_dataset_name("quickdraw", classes=["cat", "banana-split"])


def test_quickdraw_duplicate_and_too_few_classes():
    with pytest.raises(UserError, match="more than once: cat"):
        quickdraw.validate_classes(["cat", "dog", "cat"])
    with pytest.raises(UserError, match="at least 2"):
        quickdraw.validate_classes(["cat"])


def test_quickdraw_downloads_once_and_splits(qd_server, tmp_path):
    classes = list(QD_SIZES)
    train = load_dataset("quickdraw", data_dir=str(tmp_path), classes=classes)
    assert sorted(qd_server.paths) == ["/airplane.npy", "/alarm%20clock.npy", "/bee.npy"]
    folder = tmp_path / "quickdraw"
    assert sorted(os.listdir(folder)) == [
        "airplane.npy",
        "alarm clock.npy",
        "bee.npy",
    ]  # no .part leftovers

    assert train.class_names == tuple(classes) and train.image_shape == (28, 28, 1)
    assert train.images.dtype == np.uint8 and train.labels.dtype == np.int32
    assert np.bincount(train.labels).tolist() == [45, 27, 18]  # last 10% of each file is test
    assert (
        train.images[:, 0, 0, 0] == train.labels + 1
    ).all()  # labels follow the order of `classes`
    assert train.images[train.labels == 1, 0, 1, 0].tolist() == list(range(27))

    test = load_dataset("quickdraw", split="test", data_dir=str(tmp_path), classes=classes)
    assert np.bincount(test.labels).tolist() == [5, 3, 2]
    assert test.images[test.labels == 0, 0, 1, 0].tolist() == list(range(45, 50))
    assert len(qd_server.paths) == 3  # the second load read the cache

    capped = load_dataset("quickdraw", data_dir=str(tmp_path), classes=classes, max_per_class=10)
    assert np.bincount(capped.labels).tolist() == [10, 10, 10]
    capped = load_dataset(
        "quickdraw", split="test", data_dir=str(tmp_path), classes=classes, max_per_class=4
    )
    assert np.bincount(capped.labels).tolist() == [4, 3, 2]
    assert len(qd_server.paths) == 3


def test_quickdraw_offline_names_every_missing_class(tmp_path, monkeypatch):
    monkeypatch.setenv(quickdraw.URL_ENV, f"http://127.0.0.1:{_closed_port()}")
    (tmp_path / "quickdraw").mkdir()
    np.save(tmp_path / "quickdraw" / "bee.npy", _bitmaps(0, 20))
    with pytest.raises(UserError) as e:
        load_dataset(
            "quickdraw", data_dir=str(tmp_path), classes=["airplane", "bee", "alarm clock"]
        )
    msg = _one_line(e)
    assert "): airplane, alarm clock;" in msg  # bee is cached, so not missing
    assert str(tmp_path / "quickdraw") in msg and "curl" in msg and "/airplane.npy'" in msg


def test_quickdraw_interrupted_download_leaves_nothing_behind(server, tmp_path, monkeypatch):
    _, url, _ = server
    monkeypatch.setenv(quickdraw.URL_ENV, url + "/short")
    with pytest.raises(UserError, match="airplane"):
        load_dataset("quickdraw", data_dir=str(tmp_path), classes=["airplane", "bee"])
    assert os.listdir(tmp_path / "quickdraw") == []


@pytest.mark.parametrize(
    "content, match",
    [
        ("truncated", "truncated or corrupt"),
        (np.zeros((5, 28, 28), np.uint8), r"holds uint8 \(5, 28, 28\)"),
        (np.zeros((5, 784), np.float32), "holds float32"),
        ("text", "truncated or corrupt"),
    ],
)
def test_quickdraw_bad_cached_file_names_it(tmp_path, monkeypatch, content, match):
    monkeypatch.setenv(quickdraw.URL_ENV, f"http://127.0.0.1:{_closed_port()}")  # must not download
    folder = tmp_path / "quickdraw"
    folder.mkdir()
    np.save(folder / "airplane.npy", _bitmaps(0, 50))
    bad = folder / "bee.npy"
    if isinstance(content, np.ndarray):
        np.save(bad, content)
    elif content == "truncated":
        buf = io.BytesIO()
        np.save(buf, _bitmaps(1, 50))
        bad.write_bytes(buf.getvalue()[:1000])
    else:
        bad.write_text("<html>not found</html>")
    with pytest.raises(UserError, match=match) as e:
        load_dataset("quickdraw", data_dir=str(tmp_path), classes=["airplane", "bee"])
    assert str(bad) in _one_line(e) and "delete it" in str(e.value)


# ---------------------------------------------------------------- cifar10


@pytest.fixture
def reachable_host(monkeypatch):
    """Point cifar10's download probe at a local listening socket, so it passes offline."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    monkeypatch.setattr(cifar10, "DOWNLOAD_HOST", sock.getsockname())
    yield
    sock.close()


def test_cifar10_through_tfds_mock_data(tmp_path, reachable_host):
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=24, policy=tfds.testing.MockPolicy.USE_CODE):
        data = load_dataset("cifar10", data_dir=str(tmp_path))
        capped = load_dataset("cifar10", split="test", data_dir=str(tmp_path), max_per_class=1)
    assert data.images.shape == (24, 32, 32, 3) and data.images.dtype == np.uint8
    assert data.labels.shape == (24,) and data.labels.dtype == np.int32
    assert data.num_classes == 10 and data.image_shape == (32, 32, 3)
    assert 0 <= data.labels.min() and data.labels.max() < 10
    assert np.bincount(capped.labels).max() == 1


def test_cifar10_offline_is_a_user_error(tmp_path, monkeypatch):
    monkeypatch.setattr(cifar10, "DOWNLOAD_HOST", ("127.0.0.1", _closed_port()))
    with pytest.raises(UserError, match="cifar10 is not in") as e:
        load_dataset("cifar10", data_dir=str(tmp_path))
    assert str(tmp_path / "tfds") in _one_line(e)


# ---------------------------------------------------------------- npz


def _labels(*counts):
    return np.repeat(np.arange(len(counts)), counts)


def test_npz_gray_without_class_names(tmp_path):
    labels = _labels(10, 25)
    images = np.broadcast_to(labels[:, None, None].astype(np.uint8), (35, 8, 6)).copy()
    np.savez(tmp_path / "d.npz", images=images, labels=labels)
    train = load_dataset(f"npz:{tmp_path / 'd.npz'}")
    test = load_dataset(f"npz:{tmp_path / 'd.npz'}", split="test")
    assert train.image_shape == (8, 6, 1) and train.class_names == ("0", "1")
    assert np.bincount(train.labels).tolist() == [9, 23] and np.bincount(test.labels).tolist() == [
        1,
        2,
    ]
    assert (train.images[:, 0, 0, 0] == train.labels).all() and (
        test.images[:, 0, 0, 0] == test.labels
    ).all()
    capped = load_dataset(f"npz:{tmp_path / 'd.npz'}", max_per_class=5)
    assert np.bincount(capped.labels).tolist() == [5, 5]


def test_npz_rgb_with_class_names(tmp_path):
    images = np.random.default_rng(0).integers(0, 256, (12, 4, 4, 3), dtype=np.uint8)
    np.savez(
        tmp_path / "d.npz",
        images=images,
        labels=_labels(4, 4, 4),
        class_names=np.array(["a", "b", "c"]),
    )
    data = load_dataset(f"npz:{tmp_path / 'd.npz'}")
    assert data.class_names == ("a", "b", "c") and data.image_shape == (4, 4, 3) and len(data) == 9
    assert np.array_equal(data.images[:3], images[:3])


NPZ_ERRORS = {
    "missing": (None, "does not exist"),
    "not an npz": (b"hello world", "not a valid .npz"),
    "a .npy": ("npy", "single array"),
    "no images": (dict(labels=_labels(2, 2)), "no 'images' array"),
    "no labels": (dict(images=np.zeros((4, 2, 2), np.uint8)), "no 'labels' array"),
    "float images": (
        dict(images=np.zeros((4, 2, 2), np.float32), labels=_labels(2, 2)),
        "float32, need uint8",
    ),
    "2-d images": (
        dict(images=np.zeros((4, 2), np.uint8), labels=_labels(2, 2)),
        r"shape \(4, 2\)",
    ),
    "4 channels": (
        dict(images=np.zeros((4, 2, 2, 4), np.uint8), labels=_labels(2, 2)),
        "4 channels",
    ),
    "negative label": (
        dict(images=np.zeros((4, 2, 2), np.uint8), labels=np.array([0, 1, -1, 1])),
        "negative",
    ),
    "label beyond names": (
        dict(
            images=np.zeros((4, 2, 2), np.uint8),
            labels=_labels(2, 2) * 2,
            class_names=np.array(["a", "b"]),
        ),
        "out of range",
    ),
    "length mismatch": (
        dict(images=np.zeros((5, 2, 2), np.uint8), labels=_labels(2, 2)),
        "5 images but 4 labels",
    ),
    "one class": (
        dict(images=np.zeros((4, 2, 2), np.uint8), labels=np.ones(4, int)),
        "at least 2 classes",
    ),
    "float labels": (dict(images=np.zeros((4, 2, 2), np.uint8), labels=np.zeros(4)), "integer"),
}


@pytest.mark.parametrize("case", NPZ_ERRORS)
def test_npz_errors(tmp_path, case):
    content, match = NPZ_ERRORS[case]
    path = tmp_path / "d.npz"
    if isinstance(content, dict):
        np.savez(path, **content)
    elif content == "npy":
        with open(path, "wb") as f:
            np.save(f, np.zeros(3))
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(UserError, match=match) as e:
        load_dataset(f"npz:{path}")
    assert str(path) in _one_line(e)


# ---------------------------------------------------------------- folder


def _save(path, size=(6, 5), mode="L", value=0, fmt=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, value).save(path, format=fmt)


def test_folder_gray(tmp_path):
    for i in range(10):
        _save(tmp_path / "cats" / f"{i:02}.png", value=10 + i)
    for i, ext in enumerate(["bmp", "gif", "png"]):
        _save(tmp_path / "dogs" / f"d{i}.{ext}", value=200)
    (tmp_path / "dogs" / "notes.txt").write_text("ignored")
    train = load_dataset(f"folder:{tmp_path}")
    test = load_dataset(f"folder:{tmp_path}", split="test")
    assert train.class_names == ("cats", "dogs") and train.image_shape == (5, 6, 1)
    assert np.bincount(train.labels).tolist() == [9, 2] and np.bincount(test.labels).tolist() == [
        1,
        1,
    ]
    assert train.images[train.labels == 0, 0, 0, 0].tolist() == list(
        range(10, 19)
    )  # sorted file order
    assert test.images[0, 0, 0, 0] == 19 and test.images[1].min() == 200


def test_folder_any_color_image_makes_it_rgb(tmp_path):
    _save(tmp_path / "a" / "1.png", value=7)
    _save(tmp_path / "a" / "2.jpg", mode="RGB", value=(250, 0, 0))
    _save(tmp_path / "b" / "1.webp", mode="RGB", value=(0, 0, 250))
    _save(tmp_path / "b" / "2.jpeg", value=9)
    data = load_dataset(f"folder:{tmp_path}")
    assert data.image_shape == (5, 6, 3) and len(data) == 2
    assert data.images[0, 0, 0].tolist() == [7, 7, 7]  # gray expands to equal RGB


def test_folder_errors(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_dataset(f"folder:{tmp_path / 'nope'}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no class sub-folders"):
        load_dataset(f"folder:{tmp_path / 'empty'}")

    root = tmp_path / "data"
    _save(root / "a" / "1.png")
    with pytest.raises(UserError, match="only one class"):
        load_dataset(f"folder:{root}")
    (root / "b").mkdir()
    with pytest.raises(UserError, match="has no images") as e:
        load_dataset(f"folder:{root}")
    assert str(root / "b") in _one_line(e)

    _save(root / "b" / "1.png", size=(7, 5))
    with pytest.raises(UserError, match="resize") as e:
        load_dataset(f"folder:{root}")
    assert str(root / "b" / "1.png") in _one_line(e)

    (root / "b" / "1.png").write_bytes(b"not a png")
    with pytest.raises(UserError, match="cannot read image") as e:
        load_dataset(f"folder:{root}")
    assert str(root / "b" / "1.png") in _one_line(e)

    good = io.BytesIO()
    Image.new("L", (6, 5)).save(good, format="PNG")
    (root / "b" / "1.png").write_bytes(good.getvalue()[:40])  # valid header, truncated pixels
    with pytest.raises(UserError, match="cannot read image") as e:
        load_dataset(f"folder:{root}")
    assert str(root / "b" / "1.png") in _one_line(e)


# ---------------------------------------------------------------- names and arguments


def test_validate_dataset_name(tmp_path):
    for name in DATASETS:
        validate_dataset_name(name)
    np.savez(tmp_path / "d.npz", x=np.zeros(1))
    validate_dataset_name(f"npz:{tmp_path / 'd.npz'}")
    validate_dataset_name(f"folder:{tmp_path}")
    with pytest.raises(UserError, match="did you mean doodles") as e:
        validate_dataset_name("doodle")
    _one_line(e)
    with pytest.raises(UserError, match="needs a path"):
        validate_dataset_name("npz:")
    with pytest.raises(UserError, match="does not exist"):
        validate_dataset_name(f"npz:{tmp_path / 'missing.npz'}")
    with pytest.raises(UserError, match="only applies to the quickdraw"):
        validate_dataset_name("doodles", classes=["cat", "dog"])


def test_load_dataset_rejects_bad_arguments():
    with pytest.raises(UserError, match="unknown split"):
        load_dataset("doodles", split="validation")
    with pytest.raises(UserError, match="max_per_class"):
        load_dataset("doodles", max_per_class=0)


# ---------------------------------------------------------------- pipeline


def _indexed(n=10, classes=3):
    """Images whose pixels hold their own index, so every batch can be checked against its labels."""
    idx = np.arange(n)
    images = np.broadcast_to(idx[:, None, None, None].astype(np.uint8), (n, 2, 3, 1)).copy()
    return ImageSet(images, (idx % classes).astype(np.int32), tuple("abc"[:classes]))


def make_pipeline(data, batch, seed, start_step=0):
    """The trainer's stream (images, labels, z, fake labels), two-dimensional noise: the tests read the
    first two."""
    return training_batches(data, batch, seed, noise_dim=2, start_step=start_step)


def _stream(ds, batches):
    images, labels = [], []
    for x, y, *_ in ds.take(batches):
        images.append(x.numpy())
        labels.append(y.numpy())
    return np.concatenate(images), np.concatenate(labels)


def test_pipeline_batches_shuffle_and_repeat():
    import tensorflow as tf

    data = _indexed()
    ds = make_pipeline(data, batch=5, seed=3)
    assert ds.element_spec[0].shape == (5, 2, 3, 1) and ds.element_spec[0].dtype == tf.uint8
    assert ds.element_spec[1].shape == (5,) and ds.element_spec[1].dtype == tf.int32
    images, labels = _stream(ds, 8)  # 4 epochs of 10
    ids = images[:, 0, 0, 0].astype(int)
    assert (labels == ids % 3).all() and (images == ids[:, None, None, None]).all()
    epochs = ids.reshape(4, 10)
    assert all(sorted(e) == list(range(10)) for e in epochs)  # each epoch is a permutation
    assert len({tuple(e) for e in epochs}) > 1  # reshuffled between epochs
    assert not (epochs == np.arange(10)).all(1).all()  # and actually shuffled

    again, _ = _stream(make_pipeline(data, batch=5, seed=3), 8)
    other, _ = _stream(make_pipeline(data, batch=5, seed=4), 8)
    assert np.array_equal(again, images) and not np.array_equal(other, images)


def test_pipeline_batches_span_epochs_without_dropping():
    images, _ = _stream(make_pipeline(_indexed(n=10), batch=4, seed=0), 5)  # 20 images = 2 epochs
    ids = images[:, 0, 0, 0].astype(int)
    # Each batch is the plan's (ordered by class within it), the third straddling the two epochs.
    plan = BatchPlan(10, 4, 0)
    assert all(sorted(ids[4 * s : 4 * s + 4]) == sorted(plan.indices(s)) for s in range(5))
    epochs = np.concatenate([plan.indices(s) for s in range(5)]).reshape(2, 10)
    assert all(sorted(e) == list(range(10)) for e in epochs)


@pytest.mark.parametrize("start_step", [1, 2, 3, 7])
def test_pipeline_resumes_the_same_stream(start_step):
    full, _ = _stream(make_pipeline(_indexed(n=10), batch=4, seed=5), 10)
    resumed, _ = _stream(
        make_pipeline(_indexed(n=10), batch=4, seed=5, start_step=start_step), 10 - start_step
    )
    np.testing.assert_array_equal(resumed, full[start_step * 4 :])


def test_pipeline_rejects_batch_larger_than_data():
    with pytest.raises(UserError, match="larger than the dataset") as e:
        make_pipeline(_indexed(n=10), batch=11, seed=0)
    _one_line(e)


def test_cifar10_without_tensorflow_datasets_is_one_line(monkeypatch, tmp_path):
    """A JAX-only install has no tensorflow-datasets: CIFAR-10 says what to install."""
    monkeypatch.setitem(
        sys.modules, "tensorflow_datasets", None
    )  # `import tensorflow_datasets` fails
    with pytest.raises(
        UserError, match=r"cifar10 is read through tensorflow-datasets.*-e '\.\[tensorflow\]'"
    ):
        cifar10.load("train", data_dir=str(tmp_path))
