"""Run folders: naming a new one, finding the newest, reading a saved run, and the resume checks.

A run folder holds config.json (every setting) and dataset.json (class names, image shape); both are
written before the first step, so a folder with a config.json is a run that can be resumed or read.
"""

import dataclasses
import json
import os
from datetime import datetime
from pathlib import Path

from acgan.config import Config, saved_config
from acgan.data import path_name
from acgan.errors import UserError
from acgan.util.files import write_atomically, write_json

OUTPUTS = Path("outputs")
# Settings that define the model, its optimizer state or its data stream: a resumed run keeps them.
RESUME_FIXED = (
    "backend",
    "dataset",
    "classes",
    "max_per_class",
    "policy",
    "arch",
    "loss",
    "ema_decay",  # its checkpoints hold the average or not
    "width",
    "batch",
    "seed",
)
LENGTH_SETTINGS = ("steps", "epochs", "minutes")
# Where this process sits among several (JAX's multi_worker): never taken from the saved run.
PER_PROCESS = ("coordinator_address", "num_processes", "process_id")


def default_run_dir(config, now=None):
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    return OUTPUTS / f"{stamp}-{path_name(config.dataset)}-{config.policy}-b{config.batch}"


def newest_run(root=OUTPUTS):
    runs = sorted(Path(root).glob("*/config.json"), key=lambda p: p.stat().st_mtime)
    if not runs:
        raise UserError(f"--resume: there is no run under {root}/ to resume; pass --output_dir")
    return runs[-1].parent


def read_run(run_dir):
    """(Config, dataset info dict) of a finished or running run folder; UserError if it is not one."""
    try:
        config = Config.from_json((run_dir / "config.json").read_text(), run_dir / "config.json")
        info = json.loads((run_dir / "dataset.json").read_text())
    except (OSError, ValueError, TypeError) as e:
        raise UserError(
            f"{run_dir} is not a readable acgan run folder ({e.__class__.__name__})"
        ) from None
    return config, info


def config_to_resume(config, given):
    """The config a command line resumes with: the saved run's, overridden by the settings in `given`
    (the names of the flags typed); `config` unchanged when its folder holds no run yet."""
    run_dir = Path(config.output_dir) if config.output_dir else newest_run()
    saved = saved_config(run_dir) if run_dir.is_dir() else None
    if saved is None:
        if config.resume:
            raise UserError(f"--resume: nothing to resume in {run_dir} (no config.json)")
        return config
    overrides = {name: getattr(config, name) for name in given if hasattr(config, name)}
    if any(name in overrides for name in LENGTH_SETTINGS):
        saved = dataclasses.replace(saved, steps=None, epochs=None, minutes=None)
    if (
        "strategy" in overrides and "devices" not in overrides
    ):  # a new strategy, not the old one's devices
        saved = dataclasses.replace(saved, devices=None)
    overrides.update(
        {name: getattr(config, name) for name in PER_PROCESS if hasattr(saved, name)},
        resume=True,
        output_dir=str(run_dir),
    )
    return dataclasses.replace(saved, **overrides)


def check_resumable(config, saved, run_dir):
    if saved is None:
        raise UserError(f"nothing to resume in {run_dir}: it holds no run (no config.json)")
    changed = [
        f"--{k} {getattr(saved, k)!r} -> {getattr(config, k)!r}"
        for k in RESUME_FIXED
        if getattr(saved, k) != getattr(config, k)
    ]
    if changed:
        raise UserError(
            f"cannot resume {run_dir} with a different model config ({'; '.join(changed)}); "
            "use a new --output_dir"
        )


def prepare_run_dir(config, chief=True):
    """The run's folder and whether it resumes an earlier run; refuses a file or an unwritable place.

    A non-chief multi-worker task only reads the folder: it creates and writes nothing there.
    """
    run_dir = Path(config.output_dir) if config.output_dir else default_run_dir(config)
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"--output_dir {run_dir} is a file, not a folder")
    saved = saved_config(run_dir) if run_dir.is_dir() else None
    resume = config.resume or saved is not None
    if resume:
        check_resumable(config, saved, run_dir)
    if not chief:
        return run_dir, resume
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / f".write_test.{os.getpid()}"  # per process: two at once must not race
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UserError(f"cannot write to output folder {run_dir}: {e.strerror}") from None
    return run_dir, resume


def write_run_files(files_dir, config, data):
    """config.json and dataset.json: what read_run and a resume need."""
    write_atomically(files_dir / "config.json", config.to_json() + "\n")
    write_json(
        files_dir / "dataset.json",
        {
            "class_names": list(data.class_names),
            "image_shape": list(data.image_shape),
            "num_images": len(data.images),
        },
    )
