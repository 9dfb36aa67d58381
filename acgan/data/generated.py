"""What the embedded, generated datasets (doodles, swatches) share: one split from a seed, its full
arrays cached as .npz under data_dir/<name>/, a --max_per_class cap taken as a prefix (images are
drawn class-interleaved), and a damaged or unwritable cache costing only a regeneration."""

from __future__ import annotations

import os
import tempfile
from typing import Callable

import numpy as np

from acgan.data.image_set import ImageSet


def cache_path(data_dir: str, name: str, version: int, split: str, seed: int, per_class: int) -> str:
    return os.path.join(data_dir, name, f"{name}-v{version}-seed{seed}-{split}-{per_class}.npz")


def load_split(path: str, class_names: tuple, full: int, shape: tuple, generate: Callable, *,
               max_per_class: int | None) -> ImageSet:
    """The split cached at `path` (full per class, images of `shape`), else `generate(full)` and cached."""
    per_class = full if max_per_class is None else min(full, max_per_class)
    cached = _read_cache(path, full * len(class_names), shape)
    if cached is not None:
        images, labels = cached
    else:
        images, labels = generate(per_class)
        if per_class == full:
            _save_atomic(path, images=images, labels=labels)
    n = per_class * len(class_names)
    if n < len(images):  # copy, so the full cached split can be freed
        images, labels = images[:n].copy(), labels[:n].copy()
    return ImageSet(images, labels, class_names)


def _read_cache(path: str, n: int, shape: tuple) -> tuple[np.ndarray, np.ndarray] | None:
    if not os.path.exists(path):
        return None
    try:
        with np.load(path) as f:
            images, labels = f["images"], f["labels"]
    except Exception:  # a damaged cache is only a cache: regenerate and overwrite it
        return None
    ok = images.shape == (n, *shape) and images.dtype == np.uint8 and labels.shape == (n,)
    return (images, labels.astype(np.int32)) if ok else None


def _save_atomic(path: str, **arrays: np.ndarray) -> None:
    # Temp file + os.replace: a killed run never leaves a half-written cache that looks complete.
    tmp = None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, **arrays)
        os.replace(tmp, path)
    except OSError:
        # An unwritable data_dir only costs regenerating next time.
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)
