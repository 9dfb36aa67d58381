"""User-supplied datasets: an .npz of arrays, or a folder with one sub-folder of images per class (that
the path exists, acgan.data.validate_dataset_name has checked)."""

from __future__ import annotations

import os
import zipfile
import zlib

import numpy as np
from PIL import Image, UnidentifiedImageError

from acgan.data.image_set import ImageSet, error_text
from acgan.errors import UserError

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
GRAY_MODES = ("1", "L", "LA", "I", "I;16", "F")


def load_npz(path: str) -> ImageSet:
    """Arrays `images` (N,H,W[,C] uint8) and `labels` (N ints), optional `class_names`; all of them, unsplit."""
    where = f"npz file {path}"
    how = "save it with np.savez(path, images=..., labels=...)"
    try:
        archive = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise UserError(
            f"{where} is not a valid .npz archive ({type(e).__name__}); {how}"
        ) from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise UserError(f"{where} holds a single array, not an .npz archive; {how}")
    try:
        with archive:
            arrays = {k: archive[k] for k in archive.files}
    except (
        ValueError,
        OSError,
        EOFError,
        zipfile.BadZipFile,
        zlib.error,
    ) as e:  # corrupt member or object array
        raise UserError(
            f"{where} has an unreadable array ({type(e).__name__}: {error_text(e)}); {how}"
        ) from None
    for key in ("images", "labels"):
        if key not in arrays:
            raise UserError(
                f"{where} has no {key!r} array (found: {', '.join(sorted(arrays)) or 'none'}); {how}"
            )
    images, labels = arrays["images"], arrays["labels"]

    images = _checked_images(where, images, labels)

    if "class_names" in arrays:
        names = arrays["class_names"]
        if names.ndim != 1 or names.dtype.kind not in "US":
            raise UserError(
                f"{where}: class_names is {names.dtype} {names.shape}, need a 1-D array of strings"
            )
        names = tuple(str(n) for n in names.astype(str))
        if labels.max() >= len(names):
            raise UserError(
                f"{where}: label {labels.max()} is out of range for {len(names)} class_names; fix labels or class_names"
            )
    else:
        names = tuple(str(i) for i in range(int(labels.max()) + 1))
    if len(np.unique(labels)) < 2:
        raise UserError(
            f"{where}: all images have the same label; a conditional GAN needs at least 2 classes"
        )
    return ImageSet(np.ascontiguousarray(images), labels.astype(np.int32), names)


def _checked_images(where, images, labels):
    """The images as N x H x W x C uint8 (N x H x W gains a channel), checked with their labels."""
    if images.dtype != np.uint8:
        raise UserError(
            f"{where}: images are {images.dtype}, need uint8 0..255; "
            "convert with e.g. np.clip(x * 255, 0, 255).astype(np.uint8)"
        )
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4:
        raise UserError(
            f"{where}: images have shape {images.shape}, need N x H x W or N x H x W x C"
        )
    if images.shape[-1] not in (1, 3):
        raise UserError(
            f"{where}: images have {images.shape[-1]} channels, need 1 (grayscale) or 3 (RGB)"
        )
    if len(images) == 0:
        raise UserError(f"{where}: images is empty; it needs at least one image per class")
    if labels.ndim != 1 or not (
        np.issubdtype(labels.dtype, np.integer) and labels.dtype != np.bool_
    ):
        raise UserError(
            f"{where}: labels are {labels.dtype} with shape {labels.shape}, need a 1-D integer array"
        )
    if len(labels) != len(images):
        raise UserError(
            f"{where}: {len(images)} images but {len(labels)} labels; they must match one to one"
        )
    if labels.min() < 0:
        raise UserError(
            f"{where}: labels contain negative values ({labels.min()}); use class indices 0..K-1"
        )
    return images


def load_folder(path: str) -> ImageSet:
    """One sub-folder per class (sorted names are the class names); all of it, unsplit."""
    class_dirs = sorted(
        d
        for d in os.listdir(path)
        if not d.startswith(".") and os.path.isdir(os.path.join(path, d))
    )
    if not class_dirs:
        raise UserError(
            f"image folder {path} has no class sub-folders; put each class's images in {path}/<class name>/"
        )
    if len(class_dirs) < 2:
        raise UserError(
            f"image folder {path} has only one class ({class_dirs[0]}); a conditional GAN needs at least 2 sub-folders"
        )
    files, labels = [], []
    for label, name in enumerate(class_dirs):
        found = sorted(
            f
            for f in os.listdir(os.path.join(path, name))
            if not f.startswith(".") and f.lower().endswith(IMAGE_EXTENSIONS)
        )
        if not found:
            kinds = "/".join(e[1:] for e in IMAGE_EXTENSIONS)
            raise UserError(
                f"class folder {os.path.join(path, name)} has no images ({kinds}); add some or remove it"
            )
        files += [os.path.join(path, name, f) for f in found]
        labels += [label] * len(found)

    # Headers first (cheap): decide the channel count and insist on one size before decoding anything.
    size, gray = None, True
    for file in files:
        with _open(file) as im:
            if size is None:
                size = im.size
            elif im.size != size:
                raise UserError(
                    f"image {file} is {im.size[0]}x{im.size[1]} but {files[0]} is {size[0]}x{size[1]}; "
                    "resize them all to one size (images are not resized automatically)"
                )
            gray = gray and _is_gray(im)
    mode, channels = ("L", 1) if gray else ("RGB", 3)
    images = np.empty((len(files), size[1], size[0], channels), np.uint8)
    for i, file in enumerate(files):
        with _open(file) as im:
            try:
                images[i] = np.asarray(im.convert(mode)).reshape(size[1], size[0], channels)
            except (OSError, ValueError, SyntaxError) as e:  # truncated or corrupt pixel data
                raise UserError(
                    f"cannot read image {file} ({error_text(e)}); fix or remove it"
                ) from None
    return ImageSet(images, np.array(labels, np.int32), tuple(class_dirs))


def _is_gray(im: Image.Image) -> bool:
    if im.mode == "P":  # GIFs saved from grayscale come back as a palette of grays
        palette = im.getpalette() or [0, 1, 2]
        return palette[0::3] == palette[1::3] == palette[2::3]
    return im.mode in GRAY_MODES


def _open(file: str) -> Image.Image:
    try:
        return Image.open(file)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise UserError(
            f"cannot read image {file} ({type(e).__name__}); fix or remove it"
        ) from None
