"""Image datasets: `load_dataset` picks a source module (one per source) by name; every source returns an
ImageSet (image_set.py); batches.py defines the trainer's batches from one (pipeline.py feeds them to
TensorFlow through tf.data). The sources load no framework when imported (cifar10 loads
tensorflow_datasets only when it reads), so importing acgan.data keeps a JAX process free of TensorFlow."""

from __future__ import annotations

import difflib
import os
import re
from typing import Sequence

from acgan.data import cifar10, doodles, quickdraw, swatches, user_files
from acgan.data.image_set import QUICKDRAW_DEFAULT_CLASSES, TEST_FRACTION, ImageSet, select  # noqa: F401

# The 345 Quick-Draw class names, in tensorflow_datasets' label order.
from acgan.data.quickdraw import class_names as quickdraw_class_names  # noqa: F401
from acgan.errors import UserError

DATASETS = ("doodles", "swatches", "quickdraw", "cifar10")
FILE_PREFIXES = ("npz:", "folder:")
SPLITS = ("train", "test")
GENERATED = {"doodles": doodles.DOODLES, "swatches": swatches.SWATCHES}


def validate_dataset_name(name: str, *, classes: Sequence[str] | None = None) -> None:
    """UserError for an unknown name, a missing npz/folder path or bad quickdraw classes; loads nothing."""
    kind, sep, path = name.partition(":")
    if name not in DATASETS and not (sep and kind + ":" in FILE_PREFIXES):
        close = difflib.get_close_matches(name, DATASETS + ("npz:PATH", "folder:PATH"), n=2)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        raise UserError(
            f"unknown dataset {name!r}{hint}; choose one of {', '.join(DATASETS)}, npz:PATH or folder:PATH"
        )
    if sep and not path:
        raise UserError(f"dataset {name!r} needs a path after {kind}:, e.g. {kind}:/path/to/data")
    if kind == "npz" and not os.path.isfile(path):
        raise UserError(f"npz file {path} does not exist; check the path in --dataset npz:PATH")
    if kind == "folder" and not os.path.isdir(path):
        raise UserError(
            f"image folder {path} does not exist; check the path in --dataset folder:PATH"
        )
    if classes is not None and name != "quickdraw":
        raise UserError(f"--classes only applies to the quickdraw dataset, not {name!r}; drop it")
    if classes is not None:
        quickdraw.validate_classes(classes)


def path_name(name: str) -> str:
    """The dataset's name as the run folders and judge files named after it spell it: a path without its
    npz:/folder: and its trailing /, each run of characters other than letters, digits, _ . - as one _
    ("folder:/d/my set/" -> "_d_my_set")."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name.split(":")[-1].rstrip("/"))


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

    if name in GENERATED:
        data = GENERATED[name].load(
            split, seed=seed, data_dir=data_dir, max_per_class=max_per_class
        )
    elif name == "quickdraw":
        data = quickdraw.load(
            split, data_dir=data_dir, classes=classes, max_per_class=max_per_class
        )
    elif name == "cifar10":
        data = select(cifar10.load(split, data_dir=data_dir), None, max_per_class)
    else:
        kind, _, path = name.partition(":")
        full = user_files.load_npz(path) if kind == "npz" else user_files.load_folder(path)
        data = select(full, split, max_per_class)
    if len(data) == 0:
        raise UserError(
            f"dataset {name!r} has no images in its {split!r} split; every class needs at least 2 images"
        )
    return data
