"""The --inception_stats file: the real images' statistics in TTUR's format (an .npz of `mu`, the mean of
their pool_3 features, and `sigma`, their covariance), read in place of the real images' side of the
standard FID, or written from it for later runs and other tools (TTUR's fid.py reads it as it is)."""

import hashlib
import io
import os
import zipfile
from pathlib import Path

import numpy as np

from acgan.errors import UserError
from acgan.util.files import write_atomically

STATS_KEYS = ("mu", "sigma")  # TTUR's format: the mean and covariance of the real images' features


def read_stats(path, feature_dim):
    """--inception_stats: {"path", "mu", "sigma", "sha256"} of a file in TTUR's format (an .npz of mu [F]
    and sigma [F, F], F the graph's feature size), or {"path"} where there is no file yet (scores writes
    the train images' statistics there). UserError (one line) for a file that is not that."""
    path = Path(path).expanduser().absolute()
    what = f"--inception_stats {path}"
    if not path.exists():
        folder = next(folder for folder in path.parents if folder.exists())
        if not folder.is_dir() or not os.access(folder, os.W_OK):
            raise UserError(
                f"{what} does not exist and cannot be written: {folder} is not a writable folder"
            )
        return {"path": path}
    try:
        data = path.read_bytes()
        with np.load(io.BytesIO(data), allow_pickle=False) as stats:
            arrays = {key: stats[key] for key in STATS_KEYS if key in stats.files}
    except (OSError, ValueError, TypeError, EOFError, zipfile.BadZipFile) as e:
        raise UserError(
            f"{what} cannot be read as an .npz file ({type(e).__name__}): the statistics file is "
            "TTUR's format, mu and sigma in one .npz"
        ) from None
    missing = [key for key in STATS_KEYS if key not in arrays]
    if missing:
        raise UserError(
            f"{what} has no {' nor '.join(missing)}: the statistics file is TTUR's format, an .npz of "
            "mu (the mean of the real images' pool_3 features) and sigma (their covariance)"
        )
    mu, sigma = arrays["mu"], arrays["sigma"]
    if mu.shape != (feature_dim,) or sigma.shape != (feature_dim, feature_dim):
        raise UserError(
            f"{what} holds mu {list(mu.shape)} and sigma {list(sigma.shape)}: this graph's pool_3 "
            f"features are {feature_dim}-d, so mu [{feature_dim}] and sigma [{feature_dim}, {feature_dim}]"
        )
    if not all(a.dtype.kind in "fiu" and np.isfinite(a).all() for a in (mu, sigma)):
        raise UserError(f"{what} holds values that are not finite numbers in mu or sigma")
    return {
        "path": path,
        "mu": mu.astype(np.float64),
        "sigma": sigma.astype(np.float64),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def write_npz(path, **arrays):
    """Writes the arrays as an .npz file (the statistics: TTUR's format, mu and sigma) to `path`; returns
    its sha256."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_atomically(path, buffer.getvalue())
    return hashlib.sha256(buffer.getvalue()).hexdigest()


def report_text(stats):
    """What the report says of an --inception_stats file."""
    if not stats["read"]:
        return (
            f"written to `{stats['file']}` (sha256 {stats['sha256']}): TTUR's format, mu and sigma"
        )
    return (
        f"read from `{stats['file']}` (sha256 {stats['sha256']}) as the FID's real side; KID, the "
        "per-class FID and the train images' Inception score need the real images' features, which "
        "it does not hold: not computed"
    )
