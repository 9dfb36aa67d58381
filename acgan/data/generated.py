"""What the embedded, generated datasets (doodles, swatches) share: a split drawn from a seed, one image
at a time with the classes interleaved, its full arrays cached as .npz under data_dir/<name>/, a
--max_per_class cap taken as a prefix, and a damaged or unwritable cache costing only a regeneration."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
from typing import Callable

import numpy as np

from acgan.data.image_set import ImageSet
from acgan.errors import DiskFull
from acgan.util.files import write_atomically

STREAMS = {
    "train": 0,
    "test": 1,
}  # independent seed streams, so train and test never share an image


@dataclasses.dataclass(frozen=True)
class GeneratedSet:
    """A dataset drawn from a seed: `draw(class name, rng)` makes one uint8 image of `shape`."""

    name: str
    version: int  # bumped whenever the drawing changes, so cached arrays from older code are never reused
    class_names: tuple
    per_class: dict  # split -> images per class in the full split
    shape: tuple
    draw: Callable
    seed_salt: tuple = ()  # appended to (seed, stream) in the generator's seed

    def load(
        self, split: str, *, seed: int = 0, data_dir: str = "data", max_per_class: int | None = None
    ) -> ImageSet:
        """One split, from the cache when present; the same seed always gives the same bytes."""
        full = self.per_class[split]
        per_class = full if max_per_class is None else min(full, max_per_class)
        path = self.cache_path(data_dir, split, seed)
        cached = _read_cache(path, full * len(self.class_names), self.shape)
        if cached is not None:
            images, labels = cached
        else:
            images, labels = self.generate(per_class, seed=seed, stream=STREAMS[split])
            if per_class == full:
                buffer = io.BytesIO()
                np.savez_compressed(buffer, images=images, labels=labels)
                # Atomic: a killed run never leaves a half-written cache that looks complete. An
                # unwritable (or full) data_dir only costs regenerating next time.
                with contextlib.suppress(OSError, DiskFull):
                    write_atomically(path, buffer.getvalue())
        n = per_class * len(self.class_names)
        if n < len(images):  # copy, so the full cached split can be freed
            images, labels = images[:n].copy(), labels[:n].copy()
        return ImageSet(images, labels, self.class_names)

    def cache_path(self, data_dir: str, split: str, seed: int) -> str:
        name, full = self.name, self.per_class[split]
        return os.path.join(data_dir, name, f"{name}-v{self.version}-seed{seed}-{split}-{full}.npz")

    def generate(
        self, per_class: int, *, seed: int, stream: int = 0
    ) -> tuple[np.ndarray, np.ndarray]:
        """uint8 [classes*per_class, *shape] images and int32 labels cycling through the classes, so that
        fewer per class are a prefix; the same (seed, stream) always gives the same bytes."""
        rng = np.random.default_rng([seed, stream, *self.seed_salt])
        n = per_class * len(self.class_names)
        labels = (np.arange(n) % len(self.class_names)).astype(np.int32)
        images = np.empty((n, *self.shape), np.uint8)
        for i, label in enumerate(labels):
            images[i] = self.draw(self.class_names[label], rng)
        return images, labels


def _read_cache(path: str, n: int, shape: tuple) -> tuple[np.ndarray, np.ndarray] | None:
    try:
        with np.load(path) as f:
            images, labels = f["images"], f["labels"]
    # None yet, or a damaged one, which is only a cache: regenerate and overwrite it.
    except Exception:  # noqa: BLE001
        return None
    ok = images.shape == (n, *shape) and images.dtype == np.uint8 and labels.shape == (n,)
    return (images, labels.astype(np.int32)) if ok else None
