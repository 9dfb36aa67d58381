"""Classification accuracy score (CAS; Ravuri and Vinyals, "Classification Accuracy Score for Conditional
Generative Models", NeurIPS 2019): the judge's CNN trained on the generated samples, each labelled with
the class G was asked for, then scored on the real test images.

Conditional accuracy asks the judge, trained on real images, to name each sample's class; the judge
must name *some* class for any image, so samples that carry one strong cue of a class pass (on swatches
it names every pixel-noise image "waves"). CAS turns the question round: can a classifier learn the real
classes from G's samples alone? It drops for a class G draws as a caricature (one cue, not the class's
variety) or as something the real class does not look like, and it needs no judge that can reject.

Its reference is the same training on as many real train images per class as were generated: what a
generator drawing exactly the data's distribution would score, finite samples being the only
difference. Both classifiers train from the same seed, in the same order of batches. The reference
depends only on the data, the seed and the epochs, so it is cached beside the judges (data_dir/judges/)
and trained once per sample count, not once per evaluation.
"""

import contextlib
import hashlib
import json
import time
from pathlib import Path

import numpy as np

from acgan.data.image_set import ImageSet
from acgan.quality import judge as judge_lib
from acgan.quality.metrics import class_counts, per_class_subset
from acgan.util.files import write_json

# The judge trains 3 epochs on up to 5,000 images per class; CAS trains on the samples, usually fewer
# (10,000 for ten classes), so it trains longer: at 3 epochs a classifier of 1,000 real images per class
# stayed well below the judge, at 8 it reached it (docs/quality.md).
EPOCHS = 8


def classification_accuracy_score(
    fake, labels, test_set, train_set, cache_dir, seed=0, epochs=EPOCHS
):
    """CAS of the uint8 samples `fake` [N, H, W, C] drawn for int `labels` [N], and its real reference.

    Returns a JSON-ready dict: overall and per-class accuracy on every image of `test_set`, the same for
    a classifier trained on real `train_set` images (as many per class as `labels` has; all of a class
    when it has fewer), the sizes, epochs, seed and seconds. `cache_dir`: where the reference is cached;
    result["real_reference"]["cached"] says whether it came from there."""
    started = time.perf_counter()
    names = list(test_set.class_names)
    generated = ImageSet(np.asarray(fake, np.uint8), np.asarray(labels, np.int32), tuple(names))
    real = ImageSet(
        *per_class_subset(train_set, class_counts(generated.labels, len(names)), seed), tuple(names)
    )
    score = _score(generated, test_set, seed, epochs)  # {accuracy, per_class, num_train}
    path = _reference_path(cache_dir, real, test_set, seed, epochs)
    reference = _read_cached(path)
    cached = reference is not None
    if not cached:
        reference = _score(real, test_set, seed, epochs)
        # an unwritable data_dir only costs training the reference again next time
        with contextlib.suppress(OSError):
            write_json(path, reference)
    return {
        **score,
        "real_reference": dict(reference, cached=cached),
        "num_test": len(test_set),
        "epochs": epochs,
        "seed": seed,
        "seconds": time.perf_counter() - started,
        "what": "the judge's CNN trained on the generated samples (their labels: the classes G was asked for), "
        "scored on the real test images; the reference trained on real train images instead",
    }


def _score(images, test_set, seed, epochs):
    info = judge_lib.train(images, test_set, epochs=epochs, seed=seed, echo=lambda line: None).info
    return {
        "accuracy": info["test_accuracy"],
        "per_class": info["test_accuracy_per_class"],
        "num_train": len(images),
    }


def _reference_path(cache_dir, real, test_set, seed, epochs):
    """The reference's cache file: keyed by the real images it trains on, the test split, seed and epochs,
    and the judge's format (its CNN and training: the judge cache's own key)."""
    key = {
        "format": 1,
        "judge_format": judge_lib.FORMAT,
        "train": judge_lib.fingerprint(real),
        "test": judge_lib.fingerprint(test_set),
        "seed": seed,
        "epochs": epochs,
    }
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return Path(cache_dir) / f"cas-reference-{digest}.json"


def _read_cached(path):
    """The cached reference, or None when it is missing or damaged (only a cache: train again)."""
    with contextlib.suppress(OSError, ValueError):
        score = json.loads(path.read_text())
        if isinstance(score, dict) and {"accuracy", "per_class", "num_train"} <= score.keys():
            return score
    return None
