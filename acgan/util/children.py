"""Running acgan modules as child processes: their environment, and the last line of their log."""

import os
import re
from pathlib import Path

from acgan.errors import one_line

PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding acgan/


def child_env():
    """This process's environment, with acgan importable and TensorFlow's C++ chatter turned down."""
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    return env


def last_log_line(path, limit=300):
    """The last non-blank line of a log, whitespace collapsed, at most `limit` characters.

    Splits on carriage returns too: Keras's progress bar redraws one line with them.
    """
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    lines = [l.strip() for l in re.split(r"[\r\n]+", text) if l.strip()]
    return one_line(lines[-1], limit) if lines else ""
