"""Rebuilds a run's generator from its latest checkpoint and writes samples (PNG grid or npz)."""
import io
import json

import numpy as np
import tensorflow as tf

from acgan import images, precision
from acgan.config import Config
from acgan.errors import UserError
from acgan.files import write_atomically
from acgan.gan import ACGAN
from acgan.models import build_models


def load_run(run_dir):
    """(config, dataset info, ACGAN with the latest checkpoint restored) of a run folder."""
    try:
        config = Config.from_json((run_dir / "config.json").read_text())
        info = json.loads((run_dir / "dataset.json").read_text())
    except (OSError, ValueError, TypeError) as e:
        raise UserError(f"{run_dir} is not a readable acgan run folder ({e.__class__.__name__})") from None
    latest = tf.train.latest_checkpoint(str(run_dir / "checkpoints"))
    if latest is None:
        raise UserError(f"{run_dir} has no checkpoint yet")
    precision.set_policy(config.policy)
    models = build_models(info["image_shape"], len(info["class_names"]), width=config.width)
    gan = ACGAN(models, len(info["class_names"]), config.policy, jit=False)
    tf.train.Checkpoint(gan=gan).restore(latest).expect_partial()
    return config, info, gan


def generate(gan, num_classes, per_class, seed):
    """uint8 images [num_classes * per_class, H, W, C], class-major, and their labels."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(num_classes, dtype=np.int32), per_class)
    z = rng.uniform(-1.0, 1.0, (len(labels), gan.noise_dim)).astype(np.float32)
    return generate_images(gan, z, labels), labels


def generate_images(gan, z, labels, batch=500):
    """uint8 images for noise z [N, noise_dim] and int labels [N], in inference mode."""
    parts = [gan.generate(z[i : i + batch], labels[i : i + batch]).numpy() for i in range(0, len(z), batch)]
    return images.to_uint8(np.concatenate(parts))


def generate_to_file(run_dir, per_class, out, seed=0):
    _, info, gan = load_run(run_dir)
    samples, labels = generate(gan, len(info["class_names"]), per_class, seed)
    if out.suffix.lower() == ".png":
        images.save_grid(samples, len(info["class_names"]), out)
    else:
        buffer = io.BytesIO()
        np.savez_compressed(buffer, images=samples, labels=labels, class_names=np.array(info["class_names"]))
        write_atomically(out, buffer.getvalue())
    return out
