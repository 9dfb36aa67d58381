"""The classification accuracy score: a classifier trained on the samples, scored on real test images."""

import numpy as np
import pytest

from acgan.quality import cas

PER_CLASS = 100  # doodles: 1,000 "samples" per case, 8 epochs of the judge's CNN: seconds


@pytest.fixture(scope="module")
def splits(doodles_cache):
    """The doodles drawn once for the whole test process (conftest.doodles_cache), not again here."""
    from acgan.data import load_dataset

    data_dir = str(doodles_cache)
    train = load_dataset("doodles", split="train", data_dir=data_dir, max_per_class=400)
    test = load_dataset("doodles", split="test", data_dir=data_dir, max_per_class=PER_CLASS)
    return train, test


def _samples(train, pick):
    """PER_CLASS 'generated' images per class, labels cycling as acgan.evaluate draws them; pick(c, i)
    chooses the index (within class c's train images) of the i-th sample of class c."""
    labels = (np.arange(10 * PER_CLASS) % 10).astype(np.int32)
    by_class = [np.flatnonzero(train.labels == c) for c in range(10)]
    seen = np.zeros(10, int)
    images = []
    for label in labels:
        images.append(train.images[by_class[label][pick(label, seen[label])]])
        seen[label] += 1
    return np.stack(images), labels


@pytest.mark.slow
def test_real_images_score_their_reference_copies_and_wrong_classes_score_far_below(
    splits, tmp_path
):
    """A generator drawing the data (other real train images than the reference's) scores about its
    reference; one that draws a single image per class (which the judge would name correctly every
    time) scores far below it; one that draws each class as the next class's images scores near zero.
    The reference trains once, and the other cases read it from the cache (that an uncached reference
    trains the same again is test_the_reference_is_cached_by_its_data_seed_and_epochs's)."""
    train, test = splits
    faithful = cas.classification_accuracy_score(
        *_samples(train, lambda c, i: 399 - i), test, train, cache_dir=tmp_path
    )
    reference = faithful["real_reference"]
    assert reference["num_train"] == faithful["num_train"] == 10 * PER_CLASS and faithful[
        "num_test"
    ] == len(test)
    assert reference["accuracy"] > 0.85 and abs(faithful["accuracy"] - reference["accuracy"]) < 0.06
    assert faithful["accuracy"] == pytest.approx(np.mean(list(faithful["per_class"].values())))
    assert (
        list(faithful["per_class"]) == list(test.class_names) and faithful["epochs"] == cas.EPOCHS
    )

    copies = cas.classification_accuracy_score(
        *_samples(train, lambda c, i: 0), test, train, cache_dir=tmp_path
    )
    assert copies["accuracy"] < reference["accuracy"] - 0.2
    assert copies["real_reference"]["cached"]  # the same real images: the same reference

    images, labels = _samples(train, lambda c, i: i)
    shifted = cas.classification_accuracy_score(
        images, (labels + 1) % 10, test, train, cache_dir=tmp_path
    )
    assert (
        shifted["real_reference"]["cached"]
        and shifted["real_reference"]["accuracy"] == (reference["accuracy"])
    )
    assert shifted["accuracy"] < 0.1 and max(shifted["per_class"].values()) < 0.2


@pytest.mark.slow
def test_the_reference_trains_on_as_many_real_images_per_class_as_were_generated(splits, tmp_path):
    train, test = splits
    labels = np.repeat(np.arange(10), [20] * 9 + [5]).astype(np.int32)
    images = train.images[: len(labels)]
    score = cas.classification_accuracy_score(images, labels, test, train, tmp_path, epochs=1)
    assert (
        score["num_train"] == score["real_reference"]["num_train"] == 185 and score["epochs"] == 1
    )
    with pytest.raises(
        ValueError
    ):  # labels outside the classes are refused, as any ImageSet refuses them
        cas.classification_accuracy_score(images, labels + 1, test, train, tmp_path, epochs=1)


@pytest.mark.slow
def test_the_reference_is_cached_by_its_data_seed_and_epochs(splits, tmp_path):
    train, test = splits
    labels = np.repeat(np.arange(10), 12).astype(np.int32)
    images = train.images[: len(labels)]
    first = cas.classification_accuracy_score(
        images, labels, test, train, epochs=1, cache_dir=tmp_path
    )
    (cached,) = tmp_path.glob("cas-reference-*.json")
    again = cas.classification_accuracy_score(
        images, labels, test, train, epochs=1, cache_dir=tmp_path
    )
    assert not first["real_reference"]["cached"] and again["real_reference"]["cached"]
    assert {k: again["real_reference"][k] for k in ("accuracy", "per_class", "num_train")} == {
        k: first["real_reference"][k] for k in ("accuracy", "per_class", "num_train")
    }
    # Without the cache (another folder) it trains again, to the same classifier: same seed, same data.
    uncached = cas.classification_accuracy_score(
        images, labels, test, train, cache_dir=tmp_path / "another", epochs=1
    )
    assert not uncached["real_reference"]["cached"]
    assert uncached["real_reference"]["accuracy"] == pytest.approx(
        first["real_reference"]["accuracy"]
    )
    other_seed = cas.classification_accuracy_score(
        images, labels, test, train, epochs=1, seed=1, cache_dir=tmp_path
    )
    assert (
        not other_seed["real_reference"]["cached"]
        and len(list(tmp_path.glob("cas-reference-*.json"))) == 2
    )
    cached.write_text("{not json")  # a damaged cache is retrained and rewritten
    retrained = cas.classification_accuracy_score(
        images, labels, test, train, epochs=1, cache_dir=tmp_path
    )
    assert not retrained["real_reference"]["cached"]
    assert retrained["real_reference"]["accuracy"] == first["real_reference"]["accuracy"]
