"""Checkpoints of the JAX backend: one `ckpt-N.npz` per save, no TensorFlow.

A checkpoint holds JaxStep.state() (every model and optimizer variable, loss-scale state included,
and the step, keyed by variable path) and the timing history as JSON. It is written under a temporary
name, synced and renamed, so it is whole or absent; a full disk removes the partial file and raises
DiskFull, leaving the previous checkpoint the newest. npz is a zip archive with a crc32 per array, so
reading every array finds truncation and noise: a resume takes the newest checkpoint that reads whole
and loads, and moves newer damaged ones to checkpoints/damaged/ with a line each (as checkpoints.py
does for TensorFlow's). Only model weights are needed to sample, so `assign_models` serves any backend.
"""

import io
import json
from pathlib import Path

import numpy as np

from acgan.errors import DiskFull
from acgan.training.checkpoints import RESUMING, first_line, kept, newest_of, step_of
from acgan.util import disk
from acgan.util.files import write_atomically

HISTORY_KEY = "history/sessions_json"


def candidates(directory):
    """Every ckpt-N.npz in `directory`, newest (highest N) first."""
    found = [p for p in Path(directory).glob("ckpt-*.npz") if step_of(p.stem) is not None]
    return sorted(found, key=lambda p: step_of(p.stem), reverse=True)


def read(path):
    """{key: array} of a checkpoint; raises on any damage (a missing file, truncation, a bad crc)."""
    with np.load(path, allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}


def damage(path):
    """None when every array of the checkpoint reads back with its crc; else a short reason."""
    try:
        arrays = read(path)
    except Exception as e:  # noqa: BLE001 - zipfile and numpy raise many kinds
        return f"{Path(path).name}: {first_line(e)}"
    if "step" not in arrays:
        return f"{Path(path).name}: no step in it"
    return None


def newest_intact(directory):
    """The newest checkpoint that reads whole, for readers (acgan.generate, evaluate): damaged ones are
    skipped with a line each and left where they are."""
    return newest_of(directory, candidates(directory), damage)[0]


def read_state(path):
    """The step's state saved in checkpoint `path` (JaxStep.load_state's input): all but the history."""
    return {key: value for key, value in read(path).items() if key != HISTORY_KEY}


def assign_models(arrays, models, model_names):
    """Assigns the model weights of a checkpoint's arrays to the Keras models (on any backend)."""
    for name, model in zip(model_names, models):
        for variable in model.variables:
            variable.assign(arrays[f"models/{name}/{variable.path}"])


def assign_ema(arrays, trainer):
    """G's average from a checkpoint's arrays into a TensorFlow step (KeyError where they hold none: the
    caller's one line that the checkpoint does not fit)."""
    if not trainer.ema_decay:
        return
    weights, statistics = (
        [arrays[f"ema/generator/{variable.path}"] for variable in variables]
        for variables in (trainer.g_variables, trainer.g_statistics)
    )
    trainer.assign_ema(weights, statistics)


class JaxCheckpoints:
    """The run's checkpoints on the JAX backend: restore the newest intact one, save, keep the last few."""

    def __init__(self, trainer, directory, keep):
        self.trainer, self.directory, self.keep = trainer, Path(directory), keep
        self.latest_checkpoint = None

    def restore(self, resume_from, move_damaged=True):
        """Loads the newest intact checkpoint in `resume_from` into the step; returns (its path as a
        string, or None when there is none, and the timing history saved with it)."""
        history = []

        def load(arrays):
            sessions = arrays.pop(HISTORY_KEY, "[]")
            self.trainer.load_state(arrays)
            history[:] = json.loads(str(sessions))

        good, _ = newest_of(
            resume_from,
            candidates(resume_from),
            damage,
            lambda path: load(read(path)),
            "does not load",
            move_damaged,
            *RESUMING,
        )
        self.latest_checkpoint = str(good) if good else None
        return self.latest_checkpoint, history

    def save(self, step, sessions):
        """Writes ckpt-<step>.npz (the step's state and the timing history), then removes all but the
        newest `keep`. A full disk raises DiskFull; the previous checkpoint stays whole."""
        try:
            path = self.save_apart(self.directory / f"ckpt-{step}", sessions)
        except DiskFull as e:
            raise DiskFull(f"{e}{kept(self.latest_checkpoint)}") from None
        self.latest_checkpoint = str(path)
        for old in candidates(self.directory)[self.keep :]:
            disk.remove_quietly(old)

    def save_apart(self, prefix, sessions):
        """The same checkpoint as `prefix`.npz, outside the rotation (the best one, best.py), written
        atomically; returns its path."""
        path = Path(f"{prefix}.npz")
        buffer = io.BytesIO()
        np.savez(buffer, **self.trainer.state(), **{HISTORY_KEY: np.array(json.dumps(sessions))})
        write_atomically(path, buffer.getvalue())
        return path
