"""The judge: a small float32 CNN trained on a dataset's real train split, cached under data_dir/judges/.

It scores generated samples (conditional accuracy, classifier score) and gives the feature space for the
Fréchet distance. It is independent of the GAN: never the GAN's own Q, and always float32, whatever
global dtype policy the process runs under (runs set mixed policies globally).

Cache: <data_dir>/judges/<dataset>-<key>.keras plus <dataset>-<key>.json (its held-out TEST accuracy,
training time and the key's contents). The key hashes the dataset name, classes, max_per_class, image
shape, class names, a fingerprint of the test split, the judge's architecture version and its training
settings, so a changed npz/folder dataset or a changed judge never reuses a stale model. The .json is
written last and is the commit marker: a killed training leaves no judge that looks complete.

Importing this module loads Keras: its importers do so after acgan.backend has chosen the backend.
"""

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

import keras
import numpy as np
from keras import layers

from acgan import data as data_lib
from acgan.backend import tensorflow_hidden
from acgan.model.precision import float32_policy
from acgan.quality.metrics import conditional_accuracy, real_subset
from acgan.util.files import write_json

FORMAT = "acgan-judge/1"
FEATURE_DIM = 128
EPOCHS = 3
BATCH = 128
MAX_PER_CLASS = 5000  # caps judge training data (Quick-Draw has ~100k drawings per class)
PREDICT_BATCH = 500


def build_model(image_shape, num_classes, seed=0):
    """images (uint8 values as float32) [B, H, W, C] -> class probabilities [B, K]; layer "features" is 128-d."""

    def init(i):
        return keras.initializers.GlorotUniform(seed=seed + i)

    f32 = "float32"  # explicit per layer as well as the policy guard: the saved file then says float32
    with float32_policy():
        images = keras.Input(tuple(image_shape), dtype=f32, name="images")
        x = layers.Rescaling(1.0 / 255.0, dtype=f32, name="scale")(images)
        for i, filters in enumerate((32, 64)):
            x = layers.Conv2D(
                filters,
                3,
                padding="same",
                activation="relu",
                kernel_initializer=init(i),
                dtype=f32,
                name=f"conv{i + 1}",
            )(x)
            x = layers.MaxPooling2D(2, dtype=f32, name=f"pool{i + 1}")(x)
        x = layers.Flatten(dtype=f32, name="flatten")(x)
        features = layers.Dense(
            FEATURE_DIM, activation="relu", kernel_initializer=init(2), dtype=f32, name="features"
        )(x)
        x = layers.Dropout(0.3, seed=seed, dtype=f32, name="dropout")(features)
        probs = layers.Dense(
            num_classes, activation="softmax", kernel_initializer=init(3), dtype=f32, name="probs"
        )(x)
        return keras.Model(images, probs, name="judge")


class Judge:
    """A trained reference classifier: `predict` gives (penultimate features, class probabilities)."""

    def __init__(self, classifier, info):
        self.classifier = classifier
        self.info = info  # test_accuracy, train_seconds, class_names, path, key ...
        with float32_policy():
            self._both = keras.Model(
                classifier.input,
                [classifier.get_layer("features").output, classifier.output],
                name="judge_both",
            )
        self._real_cache = {}

    def predict(self, images, batch=PREDICT_BATCH):
        """uint8 images [N, H, W, C] -> (features float64 [N, 128], probabilities float64 [N, K])."""
        batches = [  # (features, probabilities) of each batch
            [
                np.asarray(x, np.float64)
                for x in self._both(images[i : i + batch].astype(np.float32), training=False)
            ]
            for i in range(0, len(images), batch)
        ]
        return tuple(map(np.concatenate, zip(*batches)))

    def real_reference(self, test_set, num_samples, seed=0):
        """Memoised (features, probs, labels) of the real held-out images `metrics.real_subset` picks."""
        key = (id(test_set), int(num_samples), int(seed))
        if key not in self._real_cache:
            images, labels = real_subset(test_set, num_samples, seed)
            features, probs = self.predict(images)
            # holds test_set so its id stays its own
            self._real_cache = {key: (features, probs, labels, test_set)}
        return self._real_cache[key][:3]


def train(train_set, test_set, epochs=EPOCHS, batch=BATCH, seed=0, echo=print):
    """Trains a judge on `train_set` (images in a fresh per-epoch order from `seed`), scores it on `test_set`."""
    started = time.perf_counter()
    model = build_model(train_set.image_shape, train_set.num_classes, seed=seed)
    with float32_policy():
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
        )
    rng = np.random.default_rng(seed)
    images = train_set.images.astype(np.float32)
    for epoch in range(epochs):
        order = rng.permutation(len(images))
        history = model.fit(
            images[order],
            train_set.labels[order],
            batch_size=batch,
            epochs=1,
            shuffle=False,
            verbose=0,
        )
        echo(
            f"judge epoch {epoch + 1}/{epochs}: train accuracy {history.history['accuracy'][-1]:.4f}"
        )
    train_seconds = time.perf_counter() - started
    judge = Judge(model, {})
    _, probs = judge.predict(test_set.images)
    overall, per_class = conditional_accuracy(probs, test_set.labels)
    judge.info.update(
        {
            "format": FORMAT,
            "test_accuracy": overall,
            "test_accuracy_per_class": dict(zip(test_set.class_names, per_class)),
            "num_test": len(test_set),
            "num_train": len(train_set),
            "epochs": epochs,
            "batch": batch,
            "seed": seed,
            "train_seconds": train_seconds,
            "class_names": list(train_set.class_names),
            "image_shape": list(train_set.image_shape),
            "feature_dim": FEATURE_DIM,
        }
    )
    return judge


def fingerprint(image_set):
    """sha1 of an ImageSet's images, labels and class names (a few ms for 5k 28x28 images)."""
    # Fed part by part: joining the parts would copy every image's bytes once more (150 MB for CIFAR-10).
    h = hashlib.sha1()
    h.update(np.ascontiguousarray(image_set.images).tobytes())
    h.update(np.ascontiguousarray(image_set.labels).tobytes())
    h.update("\n".join(image_set.class_names).encode())
    return h.hexdigest()


def cache_key(dataset, classes, max_per_class, test_set, seed=0):
    """(file stem, the key's contents): what decides whether a cached judge may be reused."""
    contents = {
        "format": FORMAT,
        "dataset": dataset,
        "classes": list(classes) if classes else None,
        "max_per_class": max_per_class,
        "image_shape": list(test_set.image_shape),
        "class_names": list(test_set.class_names),
        "test_fingerprint": fingerprint(test_set),
        "epochs": EPOCHS,
        "seed": seed,
    }
    digest = hashlib.sha1(json.dumps(contents, sort_keys=True).encode()).hexdigest()[:12]
    name = data_lib.path_name(dataset) or "data"
    return f"{name[-40:]}-{digest}", contents


def load_or_train(
    dataset,
    data_dir="data",
    classes=None,
    max_per_class=None,
    test_set=None,
    seed=0,
    echo=print,
):
    """The cached judge for this dataset (and class selection), trained and cached first when missing.

    `max_per_class` is the run's cap; judge training also stops at MAX_PER_CLASS images per class.
    `test_set` (the real TEST split) is loaded when not given.
    """
    if test_set is None:
        test_set = data_lib.load_dataset(
            dataset, split="test", data_dir=data_dir, classes=classes, max_per_class=max_per_class
        )
    stem, key = cache_key(dataset, classes, max_per_class, test_set, seed)
    model_path = Path(data_dir) / "judges" / f"{stem}.keras"
    info_path = model_path.with_suffix(".json")
    judge = _load(model_path, info_path, key)
    if judge is not None:
        return judge
    cap = MAX_PER_CLASS if max_per_class is None else min(max_per_class, MAX_PER_CLASS)
    train_set = data_lib.load_dataset(
        dataset, split="train", data_dir=data_dir, classes=classes, max_per_class=cap
    )
    echo(
        f"training the judge for {dataset} on {len(train_set)} real train images (cached as {model_path})"
    )
    judge = train(train_set, test_set, seed=seed, echo=echo)
    judge.info.update({"key": key, "path": str(model_path)})
    echo(
        f"judge: {judge.info['test_accuracy']:.2%} on {len(test_set)} held-out test images, "
        f"trained in {judge.info['train_seconds']:.0f} s"
    )
    try:
        _save(judge, model_path, info_path)
    except OSError as e:  # an unwritable data_dir only costs retraining next time
        echo(f"warning: could not cache the judge in {model_path.parent}: {e.strerror or e}")
    return judge


def _save(judge, model_path, info_path):
    model_path.parent.mkdir(parents=True, exist_ok=True)
    # Saved in a temporary folder beside it, then moved: a killed save leaves no judge half written.
    with (
        tempfile.TemporaryDirectory(dir=model_path.parent, prefix=f".{model_path.stem}.") as tmp,
        tensorflow_hidden(),  # Keras's saving probes TensorFlow; on JAX it need not load
    ):
        judge.classifier.save(Path(tmp) / model_path.name)
        os.replace(Path(tmp) / model_path.name, model_path)
    write_json(info_path, judge.info)


def _load(model_path, info_path, key):
    """The cached judge, or None when it is missing, was made for another key or cannot be read."""
    try:
        info = json.loads(info_path.read_text())
    except (OSError, ValueError):
        return None
    if info.get("key") != key or not model_path.exists():
        return None
    try:
        with float32_policy(), tensorflow_hidden():
            model = keras.saving.load_model(model_path, compile=False)
    except Exception:  # a damaged cache is only a cache: retrain and overwrite it
        return None
    return Judge(model, dict(info, path=str(model_path)))
