"""Atomic file writes: a killed process leaves the old file or the new one, never half of one."""
import json
import os
import tempfile
from pathlib import Path


def write_atomically(path, data):
    """Writes bytes or str to `path` via a temp file in the same folder and os.replace."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path, obj):
    write_atomically(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
