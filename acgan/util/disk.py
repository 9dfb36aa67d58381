"""A full disk (or a file-size limit, or a quota) as one clear line instead of a traceback.

Python reports it as OSError ENOSPC / EFBIG / EDQUOT; TensorFlow as ResourceExhaustedError or another
OpError whose message carries the C library's text. Both become acgan.errors.DiskFull, whose message
names what could not be written and how much space is left there.
"""

import contextlib
import errno
import os
import re
import resource
import shutil
import signal
import threading
from pathlib import Path

from acgan.errors import DiskFull

_ERRNOS = {
    errno.ENOSPC: "no space left on device",
    errno.EFBIG: "file too large",
    errno.EDQUOT: "disk quota exceeded",
}
_TEXTS = {
    "No space left on device": errno.ENOSPC,
    "File too large": errno.EFBIG,
    "Disk quota exceeded": errno.EDQUOT,
}


def full_disk_errno(exc):
    """ENOSPC, EFBIG or EDQUOT when `exc` (or what caused it) is a failed write for lack of space; else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _ERRNOS:
            return exc.errno
        if not isinstance(exc, OSError):  # TensorFlow's errors carry the C library's words
            text = str(exc)
            for words, number in _TEXTS.items():
                if words in text:
                    return number
        exc = exc.__cause__ or exc.__context__
    return None


def human_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024.0


def free_space(path):
    """'<N> free on <folder>' for the nearest existing folder of `path`."""
    folder = Path(path).absolute()
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    try:
        return f"{human_bytes(shutil.disk_usage(folder).free)} free on {folder}"
    except OSError:
        return f"free space on {folder} unknown"


def _reason(number):
    reason = _ERRNOS[number]
    if number == errno.EFBIG:
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if limit != resource.RLIM_INFINITY:
            reason += f" (this process may write files of at most {human_bytes(limit)}: ulimit -f)"
    return reason


def describe(path):
    """What a file in a run folder is, for the message."""
    parts = Path(path).parts
    if "tensorboard" in parts or "tfevents" in str(path):
        return "TensorBoard events"
    if "checkpoints" in parts:
        return "checkpoint"
    if "samples" in parts:
        return "sample grid"
    if Path(path).name.startswith("report."):
        return "run report"
    if Path(path).name in ("config.json", "dataset.json"):
        return "run settings"
    return "file"


def full_message(what, path, exc):
    """One line: what could not be written (`what`, or guessed from the path), why, and the space left."""
    what = what or describe(path)
    number = full_disk_errno(exc) or errno.ENOSPC
    return f"could not write {what} {path}: {_reason(number)}; {free_space(path)}"


def _path_in(exc, fallback):
    """The file a failed write names (OSError.filename, or a path in TensorFlow's message)."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.filename:
            return str(exc.filename)
        # TensorFlow's op prefix names devices (/job:...)
        text = re.sub(r"\{\{.*?\}\}", "", str(exc))
        for found in re.findall(r"(/[^\s;:'\"]+)", text):
            if os.path.isdir(os.path.dirname(found)):
                return found
        exc = exc.__cause__ or exc.__context__
    return str(fallback)


@contextlib.contextmanager
def full_disk_stops_clearly(folder):
    """Turns a failed write for lack of space anywhere inside into DiskFull naming the file."""
    try:
        yield
    except DiskFull:
        raise
    except Exception as e:  # noqa: BLE001 - only full-disk errors are translated, the rest re-raised
        if full_disk_errno(e) is None:
            raise
        raise DiskFull(full_message(None, _path_in(e, folder), e)) from None


def raise_if_full(exc, what, path):
    """Re-raises `exc` as DiskFull when it is a full disk; returns otherwise (the caller re-raises)."""
    if full_disk_errno(exc) is not None:
        raise DiskFull(full_message(what, path, exc)) from None


def ignore_file_size_signal():
    """With a file-size limit (ulimit -f, RLIMIT_FSIZE) the kernel kills a writer with SIGXFSZ; ignored,
    the write fails with EFBIG instead and is reported like a full disk."""
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def remove_quietly(path):
    with contextlib.suppress(OSError):
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
