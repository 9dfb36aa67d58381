"""The best checkpoint: with --eval_every, a run keeps the checkpoint whose evaluation had the lowest
overall Fréchet distance (RULE), apart from the newest ones that --keep_checkpoints rotates.

It is written at the evaluation's step into checkpoints/best/ (ckpt-N on TensorFlow, ckpt-N.npz on JAX),
which no rotation or resume looks into, and RECORD in the run folder names it with its step, the rule and
the evaluation's numbers. The order is: the new checkpoint, then the record (atomically), then the
previous best's files removed; a kill between any two leaves the record naming a whole checkpoint, and
what is left over goes at the next new best. A resumed run reads the record and goes on comparing with it.
"""

import math
from pathlib import Path

from acgan.errors import UserError
from acgan.util import disk
from acgan.util.files import read_json, write_json

RECORD = "best.json"
FOLDER = Path("checkpoints") / "best"
RULE = "the lowest overall Fréchet distance (judge features) of the --eval_every evaluations"
# An evaluation's numbers the record keeps (acgan.quality.evaluation.evaluate_gan's keys).
NUMBERS = (
    "frechet_distance",
    "frechet_distance_class_mean",
    "kernel_distance",
    "conditional_accuracy",
    "num_generated",
)


# --checkpoint of the commands that read a run: its newest checkpoint, or the best one --eval_every kept.
CHECKPOINTS = ("latest", "best")


def check_checkpoint(value):
    if value not in CHECKPOINTS:
        raise UserError(f"--checkpoint must be latest or best, got {value!r}")


def is_better(result, best):
    """Whether an evaluation `result` beats the `best` record (None: none yet) by RULE: a finite overall
    Fréchet distance below the best's. A tie keeps the earlier step."""
    distance = result.get("frechet_distance")
    if distance is None or not math.isfinite(distance):
        return False
    return best is None or distance < best["frechet_distance"]


class BestCheckpoint:
    """The run's best checkpoint and its record. `checkpoints`: the runtime's (its save_apart writes a
    checkpoint outside the rotation); files_dir: where this process writes; resumed: the run folder of
    a resume, whose record (the chief's, on every worker) the run goes on comparing with."""

    def __init__(self, checkpoints, files_dir, resumed=None):
        self.checkpoints, self.files_dir = checkpoints, Path(files_dir)
        self.record = read_json(Path(resumed) / RECORD) if resumed else None

    def offer(self, result, step, sessions):
        """Keeps the checkpoint of `step` as the best when its evaluation `result` beats the record."""
        if not is_better(result, self.record):
            return
        folder = self.files_dir / FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        written = Path(self.checkpoints.save_apart(folder / f"ckpt-{step}", sessions))
        record = {
            "step": step,
            "checkpoint": str(written.relative_to(self.files_dir)),
            "rule": RULE,
            # what was judged: G's moving average where the run keeps one (what sampling uses)
            "generator": "ema" if self.checkpoints.trainer.ema_decay else "raw",
            **{key: result.get(key) for key in NUMBERS},
        }
        write_json(self.files_dir / RECORD, record)
        self.record = record
        for path in folder.iterdir():  # the previous best, and any leftover of a killed save
            if not (path.name == written.name or path.name.startswith(written.name + ".")):
                disk.remove_quietly(path)


def record_of(run_dir):
    """`run_dir`'s record of its best checkpoint; UserError when it has none."""
    record = read_json(Path(run_dir) / RECORD)
    if record is None:
        raise UserError(
            f"--checkpoint best: {run_dir} has no best checkpoint (a run keeps one from its first "
            "--eval_every evaluation on); use --checkpoint latest"
        )
    return record


def stored(run_dir, damage):
    """The path of `run_dir`'s best checkpoint, for readers (--checkpoint best); UserError when the run
    has none or `damage` (the backend's checkpoint check) finds it damaged."""
    path = str(Path(run_dir) / record_of(run_dir)["checkpoint"])
    reason = damage(path)
    if reason:
        raise UserError(
            f"--checkpoint best: the best checkpoint of {run_dir} is damaged ({reason})"
        )
    return path
