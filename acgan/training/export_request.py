"""What an export asks for, checked before a framework loads (training/export.py does the export): the
format, the file or folder it writes, and the converter ONNX needs on the run's backend. Each problem is
one UserError line."""

import importlib.util
import os
from pathlib import Path

from acgan import backend as backend_lib
from acgan.errors import UserError

FORMATS = ("keras", "savedmodel", "onnx")


def check_output(out, format, keep_policy):
    """The path to write for `format`, before the run is read."""
    if out is None or not os.fspath(out):
        raise UserError("--out is required: the file to write, e.g. generator.keras")
    if format not in FORMATS:
        raise UserError(
            f"unknown format {format!r}: choose {', '.join(FORMATS[:-1])} or {FORMATS[-1]}"
        )
    out = Path(out)
    if format == "keras" and out.suffix.lower() != ".keras":
        raise UserError(
            f"--out must name a .keras file, not {out.name!r} (--format savedmodel writes a folder)"
        )
    if format == "onnx" and out.suffix.lower() != ".onnx":
        raise UserError(f"--out must name a .onnx file with --format onnx, not {out.name!r}")
    if format == "onnx" and keep_policy:
        raise UserError(
            "--keep_policy cannot go with --format onnx: Keras exports ONNX from float32 models only"
        )
    if format == "savedmodel" and out.exists():
        raise UserError(f"--out {out} already exists: --format savedmodel writes a new folder")
    return out


def check_installed(format, backend):
    """What `format` needs on `backend` (the run's) is installed."""
    if format == "savedmodel" and importlib.util.find_spec("tensorflow") is None:
        raise UserError(
            "--format savedmodel needs tensorflow, which is not installed: "
            + backend_lib.INSTALL["tensorflow"]
        )
    if format == "onnx":
        missing = [
            p
            for p in ("onnx", backend_lib.ONNX_CONVERTERS[backend])
            if importlib.util.find_spec(p) is None
        ]
        if missing:
            raise UserError(
                f"--format onnx on {backend} needs {' and '.join(missing)}, which "
                f"{'is' if len(missing) == 1 else 'are'} not installed: {backend_lib.INSTALL['onnx']}"
            )
