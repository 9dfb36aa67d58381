"""CIFAR-10 through tensorflow_datasets (downloaded once into data_dir/tfds), converted to numpy arrays."""

from __future__ import annotations

import os
import socket

import numpy as np

from acgan.data.image_set import ImageSet, error_text
from acgan.errors import UserError

# Where tfds fetches the archive. We probe it first because, offline, tfds retries with backoff
# for ~3.5 minutes before failing.
DOWNLOAD_HOST = ("www.cs.toronto.edu", 443)
PROBE_TIMEOUT_S = 10


def load(split: str, *, data_dir: str = "data") -> ImageSet:
    """The train (50,000) or test (10,000) split as uint8 [N,32,32,3] images with int32 labels."""
    try:  # here: tensorflow_datasets loads TensorFlow, which only a cifar10 load needs
        import tensorflow_datasets as tfds
    except ImportError:  # e.g. a JAX-only install ('.[jax]'), or its TensorFlow missing
        raise UserError(
            "cifar10 is read through tensorflow-datasets, which needs TensorFlow: "
            "in the acgan checkout, pip install -c constraints.txt -e '.[tensorflow]'"
        ) from None

    tfds_dir = os.path.join(data_dir, "tfds")
    try:
        builder = tfds.builder("cifar10", data_dir=tfds_dir)
        if not builder.is_prepared():
            _prepare(builder, tfds_dir)
        ds = builder.as_dataset(split=split, as_supervised=True)
        # Big batches keep the Python-side loop short; batch_size=-1 would be simpler but sizes the batch
        # from split metadata, which tfds.testing.mock_data leaves at 0 (then it aborts the process).
        parts = list(tfds.as_numpy(ds.batch(10_000)))
    except ModuleNotFoundError as e:
        raise UserError(
            f"tensorflow_datasets needs the missing module {e.name!r} to prepare cifar10; pip install {e.name}"
        ) from None
    images = np.concatenate([p[0] for p in parts]).astype(np.uint8, copy=False)
    labels = np.concatenate([p[1] for p in parts]).astype(np.int32)
    return ImageSet(images, labels, tuple(builder.info.features["label"].names))


def _prepare(builder, tfds_dir: str) -> None:
    how = f"connect to the internet and rerun, or copy a prepared tfds 'cifar10' folder into {tfds_dir}"
    try:
        socket.create_connection(DOWNLOAD_HOST, timeout=PROBE_TIMEOUT_S).close()
    except OSError as e:
        raise UserError(
            f"cifar10 is not in {tfds_dir} and its download host {DOWNLOAD_HOST[0]} is unreachable "
            f"({error_text(e)}); {how}"
        ) from None
    try:
        builder.download_and_prepare()
    except ModuleNotFoundError:
        raise
    except Exception as e:  # tfds surfaces network and checksum failures as many unrelated types
        raise UserError(
            f"downloading cifar10 into {tfds_dir} failed ({type(e).__name__}: {error_text(e)}); {how}"
        ) from None
