"""Quick-Draw numpy bitmaps: download only the requested classes (atomically, once) and read rows via mmap."""

from __future__ import annotations

import difflib
import functools
import http.client
import importlib.util
import os
import tempfile
import urllib.parse
import urllib.request
from typing import Sequence

import numpy as np

from acgan.data.image_set import QUICKDRAW_DEFAULT_CLASSES, ImageSet, error_text, split_slice
from acgan.errors import UserError

DEFAULT_URL = "https://storage.googleapis.com/quickdraw_dataset/full/numpy_bitmap"
URL_ENV = "ACGAN_QUICKDRAW_URL"
TIMEOUT_S = 30


@functools.cache
def class_names() -> tuple[str, ...]:
    """The 345 names, from the labels file tensorflow_datasets ships (found without importing tfds)."""
    spec = importlib.util.find_spec("tensorflow_datasets")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            "quickdraw class names come from tensorflow_datasets; pip install tensorflow-datasets"
        )
    path = os.path.join(
        spec.submodule_search_locations[0], "datasets", "quickdraw_bitmap", "labels.txt"
    )
    try:
        with open(path, encoding="utf-8") as f:
            return tuple(line.strip() for line in f if line.strip())
    except OSError as e:
        raise UserError(
            f"cannot read the quickdraw class list {path} ({error_text(e)}); reinstall tensorflow-datasets"
        ) from None


def validate_classes(classes: Sequence[str]) -> tuple[str, ...]:
    """Return classes as a tuple; UserError for an empty list, an unknown name (with close matches) or a repeat."""
    # a bare string would otherwise be read as a list of letters
    classes = (classes,) if isinstance(classes, str) else tuple(classes)
    if len(classes) < 2:
        raise UserError(
            f"quickdraw needs at least 2 classes, got {list(classes)}; name more, or omit them for the default ten"
        )
    known = class_names()
    for name in classes:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=3)
            hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
            raise UserError(
                f"unknown quickdraw class {name!r}; {hint}see quickdraw_class_names() for all 345"
            )
    dupes = sorted({c for c in classes if classes.count(c) > 1})
    if dupes:
        raise UserError(
            f"quickdraw class listed more than once: {', '.join(dupes)}; list each class once"
        )
    return classes


def base_url() -> str:
    return os.environ.get(URL_ENV, DEFAULT_URL).rstrip("/")


def class_url(name: str) -> str:
    return f"{base_url()}/{urllib.parse.quote(name)}.npy"


def load(
    split: str,
    *,
    data_dir: str = "data",
    classes: Sequence[str] | None = None,
    max_per_class: int | None = None,
) -> ImageSet:
    """Labels follow the order of `classes`; per class the last 10% of the file's rows are test, the rest train."""
    classes = validate_classes(QUICKDRAW_DEFAULT_CLASSES if classes is None else classes)
    folder = os.path.join(data_dir, "quickdraw")
    fetch(classes, folder)
    images, labels = [], []
    for label, name in enumerate(classes):
        rows = _open(os.path.join(folder, f"{name}.npy"))
        part = split_slice(len(rows), split)
        stop = part.stop if max_per_class is None else min(part.stop, part.start + max_per_class)
        # Copy only the rows we keep; the mmap leaves the rest of a ~100 MB file on disk.
        images.append(np.array(rows[part.start : stop]).reshape(-1, 28, 28, 1))
        labels.append(np.full(stop - part.start, label, np.int32))
    return ImageSet(np.concatenate(images), np.concatenate(labels), classes)


def fetch(classes: Sequence[str], folder: str) -> None:
    """Download the classes not already in folder; one UserError naming every class that could not be had."""
    missing = [c for c in classes if not os.path.exists(os.path.join(folder, f"{c}.npy"))]
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise UserError(
            f"cannot create the quickdraw folder {folder} ({error_text(e)}); pass a writable --data_dir"
        ) from None
    for i, name in enumerate(missing):
        try:
            _download(
                class_url(name),
                os.path.join(folder, f"{name}.npy"),
                f"[{i + 1}/{len(missing)}] {name}",
            )
        except (OSError, http.client.HTTPException, ValueError) as e:  # URLError is an OSError
            # Stop at the first failure: offline, every other class would fail the same way, slowly.
            raise _fetch_error(missing[i:], folder, e) from None


def _fetch_error(missing: Sequence[str], folder: str, e: Exception) -> UserError:
    reason = error_text(getattr(e, "reason", None) or e)
    example = missing[0]
    return UserError(
        f"quickdraw classes not cached in {folder} and the download from {base_url()} failed ({reason}): "
        f"{', '.join(missing)}; connect to the internet and rerun, or fetch each file yourself, e.g. "
        f"curl -o '{os.path.join(folder, example + '.npy')}' '{class_url(example)}'"
    )


def _download(url: str, path: str, title: str) -> None:
    # Write to a temp name in the same folder and os.replace at the end: a killed download never looks complete.
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".download-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            total = response.headers.get("Content-Length")
            # Here: importing Keras fixes its backend (acgan.data loads before it is chosen) and loads that framework.
            from keras.utils import Progbar

            print(f"Downloading quickdraw {title}")
            bar = Progbar(int(total) if total else None, unit_name="byte")
            done = 0
            while chunk := response.read(1 << 20):
                out.write(chunk)
                done += len(chunk)
                bar.update(done)
            if total and done != int(total):
                raise ValueError(f"connection closed after {done} of {total} bytes")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _open(path: str) -> np.ndarray:
    """The file's N x 784 uint8 rows, memory-mapped; UserError naming the file if it is not that."""
    fix = "delete it and rerun to download it again"
    try:
        rows = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise UserError(
            f"quickdraw file {path} is truncated or corrupt ({error_text(e)}); {fix}"
        ) from None
    if (
        not isinstance(rows, np.ndarray)
        or rows.dtype != np.uint8
        or rows.ndim != 2
        or rows.shape[1] != 784
    ):
        got = f"{rows.dtype} {rows.shape}" if isinstance(rows, np.ndarray) else type(rows).__name__
        raise UserError(f"quickdraw file {path} holds {got}, not N x 784 uint8 bitmaps; {fix}")
    if len(rows) < 2:
        raise UserError(
            f"quickdraw file {path} has {len(rows)} drawing(s), too few to split; {fix}"
        )
    return rows
