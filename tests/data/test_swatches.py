"""The swatches dataset: 32x32x3 colour textures, deterministic, cached, class-interleaved, colourful."""

import hashlib
import os

import numpy as np
import pytest

from acgan.data import load_dataset, swatches, validate_dataset_name


@pytest.fixture(scope="module")
def small():
    return swatches.SWATCHES.generate(40, seed=0)


def test_shapes_dtypes_classes_and_balance(small):
    images, labels = small
    assert images.shape == (400, 32, 32, 3) and images.dtype == np.uint8
    assert labels.dtype == np.int32 and np.bincount(labels).tolist() == [40] * 10
    assert labels[:10].tolist() == list(range(10))  # class-interleaved: a cap is a prefix
    assert len(swatches.CLASS_NAMES) == 10 and len(set(swatches.CLASS_NAMES)) == 10


def test_colour_and_texture_vary_within_each_class(small):
    images, labels = small
    x = images.astype(np.float32)
    # Colour: the channels differ (not grey), and each class's mean colours spread widely.
    assert np.abs(x[..., 0] - x[..., 1]).mean() > 20
    for c in range(10):
        mean_rgb = x[labels == c].mean(axis=(1, 2))
        assert mean_rgb.std(axis=0).max() > 15, swatches.CLASS_NAMES[c]
    # Texture: the patterned classes have strong local contrast; the smooth ones less.
    contrast = np.abs(np.diff(x, axis=2)).mean(axis=(1, 2, 3))
    by_class = {swatches.CLASS_NAMES[c]: contrast[labels == c].mean() for c in range(10)}
    assert by_class["stripes"] > 2 * by_class["gradient"]


def test_deterministic_per_seed_and_streams(small, tmp_path):
    again, _ = swatches.SWATCHES.generate(40, seed=0)
    assert again.tobytes() == small[0].tobytes()
    assert not np.array_equal(swatches.SWATCHES.generate(4, seed=1)[0], small[0][:40])
    assert not np.array_equal(swatches.SWATCHES.generate(4, seed=0, stream=1)[0], small[0][:40])
    capped = load_dataset("swatches", data_dir=str(tmp_path), max_per_class=4)
    assert capped.images.tobytes() == small[0][:40].tobytes() and capped.image_shape == (32, 32, 3)
    assert not os.path.exists(tmp_path / "swatches")  # only full splits are cached
    validate_dataset_name("swatches")


@pytest.mark.slow
def test_full_splits_cache_and_do_not_overlap(tmp_path):
    train = load_dataset("swatches", data_dir=str(tmp_path))
    test = load_dataset("swatches", split="test", data_dir=str(tmp_path))
    assert len(train) == 20_000 and len(test) == 5_000
    assert os.path.exists(swatches.SWATCHES.cache_path(str(tmp_path), "test", 0))
    again = load_dataset("swatches", split="test", data_dir=str(tmp_path))
    assert again.images.tobytes() == test.images.tobytes()
    hashes = {hashlib.sha1(x.tobytes()).digest() for x in train.images}
    assert not hashes & {hashlib.sha1(x.tobytes()).digest() for x in test.images}
