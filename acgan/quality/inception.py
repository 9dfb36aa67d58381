"""The Inception FID: the Fréchet distance in Keras' ImageNet InceptionV3 features, computed only where
its weights already sit in the Keras cache (this tool never downloads them), and only for natural RGB
images (CIFAR-10)."""
import os
from pathlib import Path

import numpy as np

from acgan.quality.metrics import frechet_distance_of, real_subset

INCEPTION_WEIGHTS = "inception_v3_weights_tf_dim_ordering_tf_kernels_notop.h5"
INCEPTION_DATASETS = ("cifar10",)


def inception_weights_path():
    """The InceptionV3 (no top) weights file in the Keras cache, or None; never downloads."""
    homes = [os.environ.get("KERAS_HOME"), os.path.join(os.path.expanduser("~"), ".keras"), "/tmp/.keras"]
    for home in filter(None, homes):
        path = Path(home) / "models" / INCEPTION_WEIGHTS
        if path.is_file():
            return path
    return None


def inception_features(images, weights_path, batch=100):
    """uint8 RGB images [N, H, W, 3] -> 2048-d pool features of Keras' ImageNet InceptionV3 at 299x299."""
    import keras  # here: Keras loads after acgan.backend has chosen its backend

    from acgan.model.precision import float32_policy  # imports Keras too

    with float32_policy():
        model = keras.applications.InceptionV3(include_top=False, weights=str(weights_path), pooling="avg",
                                               input_shape=(299, 299, 3))
    out = []
    for i in range(0, len(images), batch):
        x = keras.ops.image.resize(images[i : i + batch].astype(np.float32), (299, 299), interpolation="bilinear")
        out.append(np.asarray(model(x / 127.5 - 1.0, training=False), np.float64))
    return np.concatenate(out)


def inception_unavailable(dataset):
    """Why the Inception FID cannot be computed for `dataset` here (a line for the report), or None."""
    if dataset not in INCEPTION_DATASETS:
        return (f"not applicable: the standard Inception FID is defined for natural RGB images (CIFAR-10), "
                f"not {dataset}")
    if inception_weights_path() is None:
        return (f"not computed: the InceptionV3 weights ({INCEPTION_WEIGHTS}) are not in the Keras cache "
                "(~/.keras/models) on this machine, and this tool never downloads them")
    return None


def inception_fid(real_images, fake_images):
    """The Fréchet distance in InceptionV3 pool features; call only when inception_unavailable() is None."""
    path = inception_weights_path()
    real, fake = inception_features(real_images, path), inception_features(fake_images, path)
    return {"fid": frechet_distance_of(real, fake), "weights": str(path), "num_real": len(real_images),
            "num_generated": len(fake_images),
            "note": "Keras InceptionV3 ImageNet weights, 2048-d pool features at 299x299 (bilinear); close "
                    "to, but not bit-identical with, the TTUR/pytorch-fid reference network"}


def inception_entry(dataset, test_set, fake, num_samples, seed=0):
    """A result's "inception" entry: the FID of `fake` against the real test subset evaluate_gan uses, or
    {"fid": None, "note": why it is not computed}."""
    why_not = inception_unavailable(dataset)
    if why_not is not None:
        return {"fid": None, "note": why_not}
    real_images, _ = real_subset(test_set, num_samples, seed)
    return inception_fid(real_images, fake)
