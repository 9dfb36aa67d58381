"""Checkpoints a run can trust: verified before a resume, never half-written, damaged ones kept aside.

A TensorFlow checkpoint is `ckpt-N.index` plus `ckpt-N.data-0000i-of-0000n`, listed in the `checkpoint`
state file. Tensor bundles carry a crc32c per tensor, so reading every tensor finds truncation and
noise. A resume takes the newest checkpoint that reads whole and restores; newer damaged ones are
moved to checkpoints/damaged/ (never deleted) with one line each, and the state file is rewritten so
that neither TensorFlow nor a later resume points at them. A save that fails for lack of space
removes its own partial files and raises DiskFull: the previous checkpoint stays the newest.

TensorFlow is imported inside the functions that need it: move_aside and the messages serve the JAX
backend's checkpoints too (jax_checkpoints.py).
"""

import re
import sys
from pathlib import Path

from acgan.errors import DiskFull, UserError
from acgan.util import disk

DAMAGED = "damaged"
_NUMBERED = re.compile(r"^ckpt-(\d+)$")


def step_of(prefix):
    found = _NUMBERED.match(Path(prefix).name)
    return int(found.group(1)) if found else None


def candidates(directory):
    """Every checkpoint prefix in `directory`, newest first: those in the state file and those on disk."""
    import tensorflow as tf  # only here: JAX runs use this module too

    directory = Path(directory)
    prefixes = {str(p.with_suffix("")) for p in directory.glob("ckpt-*.index")}
    prefixes |= {str(p).split(".data-")[0] for p in directory.glob("ckpt-*.data-*-of-*")}
    try:
        state = tf.train.get_checkpoint_state(str(directory))
    except Exception:  # noqa: BLE001 - an unreadable state file: the files on disk still count
        state = None
    if state is not None:  # its paths may be absolute or relative; the files are in `directory`
        prefixes |= {str(directory / Path(p).name) for p in state.all_model_checkpoint_paths}
    return sorted((p for p in prefixes if step_of(p) is not None), key=step_of, reverse=True)


def first_line(exc):
    text = str(exc).strip().splitlines()
    text = re.sub(r"^\{\{[^}]*\}\}\s*", "", text[0]) if text else exc.__class__.__name__
    return text[:160]


def damage(prefix):
    """None when the checkpoint at `prefix` has all its files and every tensor reads back with a
    matching checksum; else a short reason naming the damaged file."""
    import tensorflow as tf  # only here: JAX runs use this module too

    name = Path(prefix).name
    if not Path(prefix + ".index").is_file():
        return f"{name}.index is missing"
    data = sorted(Path(prefix).parent.glob(name + ".data-*-of-*"))
    if not data:
        return f"{name}.data-00000-of-00001 is missing"
    try:
        reader = tf.train.load_checkpoint(prefix)
    except Exception as e:  # noqa: BLE001 - TensorFlow raises OpError, IndexError, ValueError...
        culprit = data[0].name if ".data-" in str(e) else f"{name}.index"
        return f"{culprit}: {first_line(e)}"
    shards = {int(p.name.rsplit("-of-", 1)[1]) for p in data}
    expected = {f"{name}.data-{i:05d}-of-{n:05d}" for n in shards for i in range(n)}
    missing = sorted(expected - {p.name for p in data})
    if missing:
        return f"{missing[0]} is missing"
    try:
        for tensor in reader.get_variable_to_dtype_map():
            reader.get_tensor(tensor)
    except Exception as e:  # noqa: BLE001
        culprit = data[0].name if len(data) == 1 else f"{name}.data-*"
        return f"{culprit}: {first_line(e)}"
    return None


def newest_of(
    directory,
    found,
    damage_of,
    load=lambda candidate: None,
    failure="does not load",
    move_damaged=False,
    doing="",
    then="the files are left as they are",
):
    """(the first of `found`, newest first, that `damage_of` finds whole and `load` accepts, or None;
    [(each newer one, why it is damaged)]). Loading is the last check: its error, "<name> <failure>:
    <first line>", is the reason. The newer ones are moved to `directory`/damaged/ (when move_damaged:
    non-chief workers only read) or skipped, with a line each on stderr. UserError when checkpoints exist
    but none is usable; then nothing is moved, so the next try sees the same folder. When every one read
    whole and only loading failed, the files are not damaged: the model this code builds differs from
    the one that wrote them (another version of acgan, or a changed preset), and the message says so.
    Both backends' checkpoints, restored or read (acgan.generate, evaluate), go through here."""
    damaged, unfit = [], []
    for good in found:
        reason = damage_of(good)
        if reason is None:
            try:
                load(good)
            except Exception as e:  # noqa: BLE001 - loading is the last check
                reason = f"{Path(good).name} {failure}: {first_line(e)}"
                unfit.append(good)
        if reason is None:
            break
        damaged.append((good, reason))
    else:
        good = None
    listed = "; ".join(reason for _, reason in damaged)
    if good is None and damaged and len(unfit) == len(damaged):
        raise UserError(
            f"{doing}the checkpoints in {directory} read whole, but none fits the model this "
            f"code builds ({listed}); were they written by another version of acgan? {then}"
        )
    if good is None and damaged:
        raise UserError(f"{doing}no intact checkpoint in {directory} ({listed}); {then}")
    for path, reason in damaged:
        fate = (
            f"moved to {move_aside(path)}, resuming from {Path(good).name}"
            if move_damaged
            else "skipping it"
        )
        sys.stderr.write(f"warning: checkpoint {Path(path).name} is damaged ({reason}); {fate}\n")
    sys.stderr.flush()
    return good, damaged


# How a resume that finds no usable checkpoint says so, on both backends (newest_of's doing and then).
RESUMING = (
    "cannot resume: ",
    "the files are left as they are; start a new run with another --output_dir",
)


def restore_newest_intact(checkpoint, directory, move_damaged=True):
    """Restores `checkpoint` from the newest intact checkpoint in `directory` (newest_of); returns its
    prefix, or None when the folder holds none. The state file then no longer lists the damaged ones."""
    # expect_partial: the caller may restore a part (the models) and the rest on its own.
    good, damaged = newest_of(
        directory,
        candidates(directory),
        damage,
        lambda prefix: (
            checkpoint.restore(prefix).assert_existing_objects_matched().expect_partial()
        ),
        "does not restore",
        move_damaged,
        *RESUMING,
    )
    if damaged and move_damaged:
        rewrite_state(directory, candidates(directory))
    return good


def newest_intact(directory):
    """The newest checkpoint in `directory` that reads whole, for readers (acgan.generate, evaluate):
    damaged ones are skipped with a line each, and left where they are. None when there is none."""
    return newest_of(directory, candidates(directory), damage)[0]


def move_aside(path):
    """Moves a checkpoint's files (TensorFlow's prefix.*, or JAX's one .npz) into damaged/ (renamed
    ckpt-N.2, .3... if that name is taken there)."""
    prefix = Path(path).with_suffix("")
    target_dir = prefix.parent / DAMAGED
    target_dir.mkdir(exist_ok=True)
    files = [p for p in prefix.parent.glob(prefix.name + ".*") if p.is_file()]
    new_name, k = prefix.name, 1
    while any((target_dir / (new_name + p.name[len(prefix.name) :])).exists() for p in files):
        k += 1
        new_name = f"{prefix.name}.{k}"
    for p in files:
        p.rename(target_dir / (new_name + p.name[len(prefix.name) :]))
    return target_dir / new_name


def rewrite_state(directory, remaining):
    """The `checkpoint` state file listing `remaining` (any order), newest last, with their times, so
    that the CheckpointManager keeps sweeping them past --keep_checkpoints."""
    import tensorflow as tf  # only here: JAX runs use this module too

    remaining = sorted((p for p in remaining if Path(p + ".index").is_file()), key=step_of)
    if remaining:
        times = [Path(p + ".index").stat().st_mtime for p in remaining]
        tf.compat.v1.train.update_checkpoint_state(
            str(directory),
            remaining[-1],
            remaining,
            all_model_checkpoint_timestamps=times,
            last_preserved_timestamp=min(times) - 1.0,
        )


def save(manager, step):
    """manager.save(checkpoint_number=step); a full disk removes this save's partial files and raises
    DiskFull, so the state file and the newest checkpoint stay the previous, whole one."""
    import tensorflow as tf  # only here: JAX runs use this module too

    directory = Path(manager.directory)
    prefix = directory / f"ckpt-{step}"
    before = set(directory.glob(f"ckpt-{step}*")) if directory.is_dir() else set()
    try:
        return manager.save(checkpoint_number=step)
    except Exception as e:  # noqa: BLE001 - only a full disk is handled here
        if disk.full_disk_errno(e) is None:
            raise
        listed = manager.latest_checkpoint == str(prefix)
        if not (listed and damage(str(prefix)) is None):  # not whole: it must never be resumed from
            leftovers = set(directory.glob(f"ckpt-{step}*")) - before
            for leftover in leftovers | set(directory.glob("checkpoint.tmp*")):
                disk.remove_quietly(leftover)
        raise DiskFull(
            disk.full_message("checkpoint", prefix, e)
            + kept(tf.train.latest_checkpoint(str(directory)))
        ) from None


def kept(latest):
    """What a failed save's message says of the checkpoint before it."""
    return f"; {Path(latest).name} is intact, resume from it" if latest else ""
