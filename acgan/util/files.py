"""Atomic file writes: a killed process leaves the old file or the new one, never half of one; a full
disk leaves the old file and raises acgan.errors.DiskFull naming the file."""

import json
import os
import tempfile
from pathlib import Path

from acgan.errors import UserError
from acgan.util import disk


def write_atomically(path, data):
    """Writes bytes or str to `path` via a temp file in the same folder and os.replace."""
    path = Path(path)
    mode = "wb" if isinstance(data, bytes) else "w"
    tmp = None  # until the temporary file exists
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, mode) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            disk.remove_quietly(tmp)
        disk.raise_if_full(e, None, path)
        raise


def write_json(path, obj):
    write_atomically(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path):
    """A JSON file's value; None when it does not exist; UserError when it cannot be read."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise UserError(f"{path} cannot be read ({e.__class__.__name__})") from None
