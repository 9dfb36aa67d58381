"""The one type every data source returns (ImageSet), and the per-class train/test split they share."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from acgan.errors import one_line

QUICKDRAW_DEFAULT_CLASSES = (
    "airplane",
    "apple",
    "bee",
    "bird",
    "book",
    "clock",
    "cow",
    "dog",
    "eye",
    "fish",
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
        if (
            self.images.dtype != np.uint8
            or self.images.ndim != 4
            or self.images.shape[-1] not in (1, 3)
        ):
            got = f"{self.images.dtype} {self.images.shape}"
            raise ValueError(f"ImageSet.images must be uint8 [N,H,W,1|3], got {got}")
        if self.labels.dtype != np.int32 or self.labels.shape != self.images.shape[:1]:
            got = f"{self.labels.dtype} {self.labels.shape}"
            raise ValueError(f"ImageSet.labels must be int32 [{len(self.images)}], got {got}")
        if len(self.labels) and (
            self.labels.min() < 0 or self.labels.max() >= len(self.class_names)
        ):
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


def error_text(e: BaseException, limit: int = 200) -> str:
    """An exception's message squeezed onto one line, for quoting inside a UserError."""
    return one_line(getattr(e, "strerror", None) or e, limit)


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
