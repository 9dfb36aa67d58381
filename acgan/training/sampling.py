"""Samples from a generator: the grids saved during training (fixed noise, one row per class), and
samples from a run folder's latest or best checkpoint (acgan.generate: a PNG grid or an npz)."""

import contextlib
import io
from pathlib import Path

import keras
import numpy as np

from acgan import presets
from acgan.errors import UserError
from acgan.model import jax_formulations, precision
from acgan.model.networks import build_models
from acgan.step.factory import build_step
from acgan.training import best, checkpoints, grids, jax_checkpoints
from acgan.training.run_dir import read_run
from acgan.util.files import write_atomically


def load_run(run_dir, ema=True, ema_statistics=None, checkpoint="latest"):
    """(config, dataset info, the step of the backend Keras runs on, with the weights of the run's newest
    intact checkpoint, or with checkpoint="best" its best one: best.py) of a run folder. ema: G's weights
    are its average where the run kept one (step.swap_in_ema; the step's `ema_decay` says whether it
    did), else G's own. ema_statistics: the average's batch-norm statistics (presets.EMA_STATISTICS);
    None: the run's.

    A JAX run's checkpoints (.npz) read on either backend; a TensorFlow run's need TensorFlow.
    """
    config, info, trainer = _load_step(run_dir, checkpoint)
    trainer.ema_statistics = ema_statistics or trainer.ema_statistics
    if ema:
        trainer.swap_in_ema()
    else:
        trainer.samples_from_ema = False
    return config, info, trainer


def sampled_generator(trainer):
    """What a step's generate() samples from, for reports: "ema" (G's average) or "raw" (G's own weights)."""
    return "ema" if trainer.samples_from_ema or trainer.generator_holds_ema else "raw"


def _load_step(run_dir, which):
    config, info = read_run(run_dir)
    running = keras.backend.backend()
    if config.backend == "tensorflow" and running != "tensorflow":
        raise UserError(
            f"{run_dir} was trained with --backend tensorflow and its checkpoints need TensorFlow: "
            "read it with --backend tensorflow"
        )
    saved = jax_checkpoints if config.backend == "jax" else checkpoints
    found = (  # before building anything
        best.stored(run_dir, saved.damage)
        if which == "best"
        else saved.newest_intact(run_dir / "checkpoints")
    )
    if found is None:
        raise UserError(f"{run_dir} has no checkpoint yet")
    precision.set_policy(config.policy)
    jax_formulations.use(config)
    preset = presets.resolve(config, info["image_shape"])  # UserError for an unknown one
    num_classes = len(info["class_names"])
    models = build_models(info["image_shape"], num_classes, width=config.width, arch=preset)
    # The preset's step, so the saved optimizers' state fits; jit on JAX: generate() compiles once.
    trainer = build_step(preset, running, models, num_classes, jit=running == "jax")
    with _mismatch_as_user_error(run_dir, found, config):
        if config.backend == "tensorflow":
            # Here: a JAX process reads its runs without TensorFlow.
            import tensorflow as tf

            checkpoint = tf.train.Checkpoint(gan=trainer, g_ema=trainer.ema_checkpointable)
            checkpoint.restore(found).assert_existing_objects_matched().expect_partial()
        elif running == "jax":  # a JAX run on JAX: the step takes its whole saved state
            trainer.load_state(saved.read_state(found))
        else:  # a JAX run on TensorFlow: its model weights by variable path, and its step
            arrays = saved.read_state(found)
            saved.assign_models(arrays, models, models._fields)  # common.MODEL_NAMES
            trainer.step.assign(int(arrays["step"]))
            saved.assign_ema(arrays, trainer)
    if running == "jax":
        trainer.sync_variables()  # the Keras models hold the weights too (evaluation calls Q as a Keras model)
    return config, info, trainer


@contextlib.contextmanager
def _mismatch_as_user_error(run_dir, checkpoint, config):
    """A checkpoint whose shapes are not the models built from the run's config (e.g. an acgan_cifar run
    from before the preset's D gained its minibatch-spread channel) is one line, not a traceback."""
    try:
        yield
    except ValueError as e:
        raise UserError(
            f"{run_dir}: {Path(checkpoint).name} does not fit the {config.arch} model this version "
            f"builds from its config ({checkpoints.first_line(e)})"
        ) from None


def generator_inputs(num_classes, noise_dim, per_class, seed):
    """(noise z [num_classes * per_class, noise_dim] uniform in [-1, 1], int32 labels), class-major: what
    acgan.generate feeds G."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(num_classes, dtype=np.int32), per_class)
    z = rng.uniform(-1.0, 1.0, (len(labels), noise_dim)).astype(np.float32)
    return z, labels


def generator_images(trainer, z, labels, batch=500):
    """float32 images in [0, 1] for noise z [N, noise_dim] and int labels [N], in inference mode."""
    parts = [
        np.asarray(trainer.generate(z[i : i + batch], labels[i : i + batch]), np.float32)
        for i in range(0, len(z), batch)
    ]
    return np.concatenate(parts)


def generate_images(trainer, z, labels, batch=500):
    """uint8 images for noise z [N, noise_dim] and int labels [N], in inference mode."""
    return grids.to_uint8(generator_images(trainer, z, labels, batch))


def write_samples(images, labels, class_names, out, row_names=True):
    """uint8 `images` (class-major) as a .png grid (one row per class, labelled unless row_names=False) or
    an .npz of images, labels and class names."""
    if out.suffix.lower() == ".png":
        grids.save_grid(
            images, len(class_names), out, class_names=class_names if row_names else None
        )
    else:
        buffer = io.BytesIO()
        np.savez_compressed(buffer, images=images, labels=labels, class_names=np.array(class_names))
        write_atomically(out, buffer.getvalue())


GRID_COLUMNS = 10


def grid_inputs(num_classes, noise_dim, seed):
    """Fixed grid noise: row r is class r, column c uses noise vector c in every row."""
    z, _ = generator_inputs(1, noise_dim, GRID_COLUMNS, seed + 1)
    return np.tile(z, (num_classes, 1)), np.repeat(
        np.arange(num_classes, dtype=np.int32), GRID_COLUMNS
    )


class TrainingGrids:
    """Saves grids at fixed noise to samples/ and to the run's TensorBoard writer."""

    def __init__(self, trainer, run_dir, num_classes, seed, class_names, labels, writer):
        """labels: write the class names beside the rows (--labels); writer: a tensorboard.SummaryWriter."""
        self.trainer, self.dir, self.rows, self.writer = (
            trainer,
            run_dir / "samples",
            num_classes,
            writer,
        )
        self.z, self.labels = grid_inputs(num_classes, trainer.noise_dim, seed)
        self.class_names = list(class_names) if labels else None

    def save(self, step, name=None):
        samples = generate_images(self.trainer, self.z, self.labels)
        grid = grids.save_grid(
            samples,
            self.rows,
            self.dir / f"{name or f'step_{step:07d}'}.png",
            class_names=self.class_names,
        )
        self.writer.image("samples", grid, step)
