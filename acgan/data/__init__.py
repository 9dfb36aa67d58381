"""Image datasets for the trainer: one ImageSet type, one loader entry point, one tf.data pipeline."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from acgan.errors import UserError

if TYPE_CHECKING:
    import tensorflow as tf

DATASETS = ("doodles", "quickdraw", "cifar10")
FILE_PREFIXES = ("npz:", "folder:")
SPLITS = ("train", "test")
QUICKDRAW_DEFAULT_CLASSES = (
    "airplane", "apple", "bee", "bird", "book", "clock", "cow", "dog", "eye", "fish",
)
TEST_FRACTION = 0.1


# eq=False: numpy arrays make the generated __eq__ ambiguous, and identity is what callers need.
@dataclass(frozen=True, eq=False)
class ImageSet:
    """Labelled images: uint8 [N, H, W, C] with C in (1, 3), int32 labels in [0, num_classes)."""

    images: np.ndarray
    labels: np.ndarray
    class_names: tuple[str, ...]

    def __post_init__(self):
        # Loaders turn user mistakes into UserError first; reaching these is a bug in a loader.
        if self.images.dtype != np.uint8 or self.images.ndim != 4 or self.images.shape[-1] not in (1, 3):
            got = f"{self.images.dtype} {self.images.shape}"
            raise ValueError(f"ImageSet.images must be uint8 [N,H,W,1|3], got {got}")
        if self.labels.dtype != np.int32 or self.labels.shape != self.images.shape[:1]:
            got = f"{self.labels.dtype} {self.labels.shape}"
            raise ValueError(f"ImageSet.labels must be int32 [{len(self.images)}], got {got}")
        if len(self.labels) and (self.labels.min() < 0 or self.labels.max() >= len(self.class_names)):
            raise ValueError(f"ImageSet.labels must lie in [0, {len(self.class_names)})")

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(int(d) for d in self.images.shape[1:])

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def __len__(self) -> int:
        return len(self.images)

    def __repr__(self) -> str:  # the default would print whole arrays
        h, w, c = self.image_shape
        return f"ImageSet({len(self)} images {h}x{w}x{c}, classes={self.class_names})"


def validate_dataset_name(name: str, *, classes: Sequence[str] | None = None) -> None:
    """UserError for an unknown name, a missing npz/folder path or bad quickdraw classes; loads nothing."""
    if name in DATASETS:
        if classes is not None:
            if name != "quickdraw":
                raise UserError(f"--classes only applies to the quickdraw dataset, not {name!r}; drop it")
            from acgan.data import quickdraw

            quickdraw.validate_classes(classes)
        return
    kind, sep, path = name.partition(":")
    if sep and kind + ":" in FILE_PREFIXES:
        if not path:
            raise UserError(f"dataset {name!r} needs a path after {kind}:, e.g. {kind}:/path/to/data")
        if kind == "npz" and not os.path.isfile(path):
            raise UserError(f"npz file {path} does not exist; check the path in --dataset npz:PATH")
        if kind == "folder" and not os.path.isdir(path):
            raise UserError(f"image folder {path} does not exist; check the path in --dataset folder:PATH")
        if classes is not None:
            raise UserError(f"--classes only applies to the quickdraw dataset, not {name!r}; drop it")
        return
    close = difflib.get_close_matches(name, DATASETS + ("npz:PATH", "folder:PATH"), n=2)
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    raise UserError(
        f"unknown dataset {name!r}{hint}; choose one of {', '.join(DATASETS)}, npz:PATH or folder:PATH"
    )


def quickdraw_class_names() -> tuple[str, ...]:
    """The 345 Quick-Draw class names, in tensorflow_datasets' label order."""
    from acgan.data import quickdraw

    return quickdraw.class_names()


def load_dataset(
    name: str,
    *,
    split: str = "train",
    data_dir: str = "data",
    classes: Sequence[str] | None = None,
    max_per_class: int | None = None,
    seed: int = 0,
) -> ImageSet:
    """Load one split of a dataset; see the package modules for where each source comes from."""
    validate_dataset_name(name, classes=classes)
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}; use 'train' or 'test'")
    if seed < 0:
        raise UserError(f"seed must be non-negative, got {seed}")
    if max_per_class is not None and max_per_class < 1:
        raise UserError(f"max_per_class must be at least 1, got {max_per_class}")

    # Sources are imported here, not at module top, so importing acgan.data stays cheap and TF-free.
    if name == "doodles":
        from acgan.data import doodles

        data = doodles.load(split, seed=seed, data_dir=data_dir, max_per_class=max_per_class)
    elif name == "quickdraw":
        from acgan.data import quickdraw

        data = quickdraw.load(split, data_dir=data_dir, classes=classes, max_per_class=max_per_class)
    elif name == "cifar10":
        from acgan.data import cifar10

        data = select(cifar10.load(split, data_dir=data_dir), None, max_per_class)
    else:
        from acgan.data import files

        kind, _, path = name.partition(":")
        full = files.load_npz(path) if kind == "npz" else files.load_folder(path)
        data = select(full, split, max_per_class)
    if len(data) == 0:
        raise UserError(
            f"dataset {name!r} has no images in its {split!r} split; every class needs at least 2 images"
        )
    return data


def error_text(e: BaseException, limit: int = 200) -> str:
    """An exception's message squeezed onto one line, for quoting inside a UserError."""
    return " ".join(str(getattr(e, "strerror", None) or e).split())[:limit]


def split_slice(n: int, split: str) -> slice:
    """Rows of one class's n items that form `split`: the last 10% (at least 1 when n >= 2) are test."""
    n_test = max(1, int(n * TEST_FRACTION)) if n >= 2 else 0
    return slice(n - n_test, n) if split == "test" else slice(0, n - n_test)


def select(data: ImageSet, split: str | None, max_per_class: int | None) -> ImageSet:
    """Keep `split` of each class (all of it when split is None), capped at max_per_class, in original order."""
    if split is None and max_per_class is None:
        return data
    keep = []
    for c in range(data.num_classes):
        idx = np.flatnonzero(data.labels == c)
        if split is not None:
            idx = idx[split_slice(len(idx), split)]
        keep.append(idx[:max_per_class])
    idx = np.sort(np.concatenate(keep))
    return ImageSet(data.images[idx], data.labels[idx], data.class_names)


def make_pipeline(data: ImageSet, batch: int, seed: int, start_step: int = 0) -> "tf.data.Dataset":
    """Endless (uint8 images [batch,H,W,C], int32 labels [batch]) batches, reshuffled every epoch from `seed`.

    `start_step` resumes the same stream after that many batches (cheaply: it skips whole epochs).
    """
    import tensorflow as tf

    n = len(data)
    if batch < 1:
        raise UserError(f"batch size must be at least 1, got {batch}")
    if batch > n:
        raise UserError(f"batch size {batch} is larger than the dataset ({n} images); lower --batch or add images")
    # Pinned to the CPU: tf.data gathers on the host, and a GPU copy would double device memory for nothing.
    with tf.device("/CPU:0"):
        images = tf.constant(data.images)
        labels = tf.constant(data.labels)

    # Shuffle indices, not images: one stateless permutation per epoch is cheap even for ~1M images
    # and depends only on (seed, epoch), never on TF's global seed state.
    def epoch_order(epoch):
        return tf.random.experimental.stateless_shuffle(
            tf.range(n, dtype=tf.int32), seed=tf.stack([tf.constant(seed, tf.int64), epoch])
        )

    def gather(idx):
        return tf.gather(images, idx), tf.gather(labels, idx)

    start_epoch, offset = divmod(start_step * batch, n)
    ds = tf.data.Dataset.counter(start=start_epoch, dtype=tf.int64).map(epoch_order).unbatch().skip(offset)
    # Batching after the epoch stream means batches may straddle epochs, so none is ever dropped short.
    ds = ds.batch(batch, drop_remainder=True).map(gather, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)
