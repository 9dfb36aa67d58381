"""The training loop: data, models, the AC-GAN step, grids, TensorBoard, checkpoints and the report."""
import dataclasses
import re
import sys
import time
from datetime import datetime
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from acgan import data as data_lib
from acgan import device, images, run_report, timing
from acgan.config import DEFAULT_STEPS
from acgan.errors import UserError
from acgan.files import write_atomically, write_json
from acgan.gan import ACGAN
from acgan.models import build_models, check_image_shape
from acgan.sampling import generate_images

GRID_COLUMNS = 10


def default_run_dir(config, now=None):
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    dataset = re.sub(r"[^A-Za-z0-9_.-]+", "_", config.dataset.split(":")[-1].rstrip("/"))
    return Path("outputs") / f"{stamp}-{dataset}-{config.policy}-b{config.batch}"


def prepare_run_dir(config):
    """The run's folder, created empty; refuses a file, an unwritable place or an earlier run."""
    run_dir = Path(config.output_dir) if config.output_dir else default_run_dir(config)
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"--output_dir {run_dir} is a file, not a folder")
    if (run_dir / "config.json").exists():
        raise UserError(f"{run_dir} already holds a run; choose another --output_dir")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write_test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UserError(f"cannot write to output folder {run_dir}: {e.strerror}") from None
    return run_dir


def load_data(config):
    data = data_lib.load_dataset(
        config.dataset,
        split="train",
        data_dir=config.data_dir,
        classes=config.classes,
        max_per_class=config.max_per_class,
    )  # the data's own seed stays fixed: runs with other --seed values train on the same doodles
    check_image_shape(data.image_shape)
    if config.batch > len(data.images):
        raise UserError(
            f"--batch {config.batch} is larger than the dataset ({len(data.images)} images)"
        )
    return data


def total_steps(config, num_images):
    """The step budget, or None when the run is bounded by --minutes."""
    if config.minutes is not None:
        return None
    if config.epochs is not None:
        return config.epochs * (num_images // config.batch)
    return config.steps or DEFAULT_STEPS


def grid_inputs(num_classes, noise_dim, seed):
    """Fixed grid noise: row r is class r, column c uses noise vector c in every row."""
    rng = np.random.default_rng(seed + 1)
    z = rng.uniform(-1.0, 1.0, (GRID_COLUMNS, noise_dim)).astype(np.float32)
    z = np.tile(z, (num_classes, 1))
    labels = np.repeat(np.arange(num_classes, dtype=np.int32), GRID_COLUMNS)
    return z, labels


class _Grids:
    """Saves grids at fixed noise to samples/ and TensorBoard."""

    def __init__(self, gan, run_dir, num_classes, seed):
        self.gan, self.dir, self.rows = gan, run_dir / "samples", num_classes
        self.z, self.labels = grid_inputs(num_classes, gan.noise_dim, seed)

    def save(self, step, name=None):
        samples = generate_images(self.gan, self.z, self.labels)
        grid = images.save_grid(samples, self.rows, self.dir / f"{name or f'step_{step:07d}'}.png")
        tf.summary.image("samples", grid[None], step=step)


def run(config, command=None):
    """Trains one AC-GAN as `config` says and returns the run folder. The dtype policy must be set."""
    config.validate()
    policy = keras.mixed_precision.global_policy().name
    if policy != config.policy:
        raise RuntimeError(f"set the dtype policy {config.policy!r} before run() (it is {policy!r})")
    started = time.perf_counter()
    data = load_data(config)
    run_dir = prepare_run_dir(config)
    write_atomically(run_dir / "config.json", config.to_json() + "\n")
    write_json(run_dir / "dataset.json", {
        "class_names": list(data.class_names),
        "image_shape": list(data.image_shape),
        "num_images": len(data.images),
    })

    keras.utils.set_random_seed(config.seed)
    models = build_models(data.image_shape, data.num_classes, width=config.width)
    gan = ACGAN(models, data.num_classes, config.policy, seed=config.seed, jit=config.jit)
    checkpoints = tf.train.CheckpointManager(
        tf.train.Checkpoint(gan=gan), run_dir / "checkpoints", max_to_keep=config.keep_checkpoints
    )
    writer = tf.summary.create_file_writer(str(run_dir / "tensorboard"))
    batches = iter(data_lib.make_pipeline(data, config.batch, config.seed))
    steps = total_steps(config, len(data.images))
    deadline = None if config.minutes is None else started + config.minutes * 60.0
    progress = keras.utils.Progbar(steps, stateful_metrics=_STATEFUL, unit_name="step")

    step_seconds, compile_seconds, values = [], None, {}
    with writer.as_default():
        grids = _Grids(gan, run_dir, data.num_classes, config.seed)
        loop_started = time.perf_counter()
        while True:
            step = int(gan.step.numpy()) + 1
            tick = time.perf_counter()
            images_batch, labels_batch = next(batches)
            metrics = gan.train_step(images_batch, labels_batch)
            values = {k: float(v) for k, v in metrics.items()}  # the device sync
            elapsed = time.perf_counter() - tick
            if step == 1:
                compile_seconds = elapsed
            elif step > 1 + config.warmup_steps:
                step_seconds.append(elapsed)
            for name, value in values.items():
                tf.summary.scalar(name, value, step=step)
            progress.update(step, [(k, values[k]) for k in _SHOWN if k in values])
            if config.sample_every and step % config.sample_every == 0:
                grids.save(step)
            if step % config.checkpoint_every == 0:
                checkpoints.save(checkpoint_number=step)
            if (steps is not None and step >= steps) or (deadline and time.perf_counter() >= deadline):
                break
        loop_seconds = time.perf_counter() - loop_started
        grids.save(step, name="final")
        if checkpoints.latest_checkpoint != str(run_dir / "checkpoints" / f"ckpt-{step}"):
            checkpoints.save(checkpoint_number=step)
    writer.flush()
    if steps is None:
        sys.stdout.write("\n")

    times = timing.timing_summary(step_seconds, config.batch)
    report = {
        "run_dir": str(run_dir),
        "command": command or "acgan.trainer.run",
        "config": dataclasses.asdict(config),
        "device": device.describe_device(),
        "policy": config.policy,
        "jit": config.jit,
        "batch": config.batch,
        "steps": step,
        "warmup_steps": config.warmup_steps,
        "compile_seconds": compile_seconds,
        "timing": times,
        "cost": timing.cost_summary(times.get("time_per_batch_ms"), config.price_per_hour),
        "peak_memory_bytes": device.peak_memory_bytes(),
        "loop_seconds": loop_seconds,
        "wall_seconds": time.perf_counter() - started,
        "final_metrics": values,
    }
    run_report.write_report(run_dir, report)
    return run_dir


# On the console: losses and accuracies averaged since the start, loss scale and skips as they are now.
_SHOWN = ("d_loss", "g_loss", "q_loss", "q_accuracy_real", "q_accuracy_fake", "g_loss_scale", "g_skipped")
_STATEFUL = ("g_loss_scale", "g_skipped")
