"""The trainer's input stream from an ImageSet, in tf.data: shuffled batches and G's noise, a pure
function of (seed, step), so a resumed run and any number of replicas see exactly the same batches."""
import tensorflow as tf

from acgan.data.image_set import ImageSet
from acgan.errors import UserError


def make_pipeline(data: ImageSet, batch: int, seed: int, start_step: int = 0) -> tf.data.Dataset:
    """Endless (uint8 images [batch,H,W,C], int32 labels [batch]) batches, reshuffled every epoch from `seed`.

    `start_step` resumes the same stream after that many batches (cheaply: it skips whole epochs).
    """
    n = len(data)
    if batch < 1:
        raise UserError(f"batch size must be at least 1, got {batch}")
    if batch > n:
        raise UserError(f"batch size {batch} is larger than the dataset ({n} images); lower --batch or add images")
    # Pinned to the CPU: tf.data gathers on the host, and a GPU copy would double device memory for nothing.
    with tf.device("/CPU:0"):
        images = tf.constant(data.images)
        labels = tf.constant(data.labels)

    # Shuffle indices, not images: one stateless permutation per epoch is cheap even for ~1M images
    # and depends only on (seed, epoch), never on TF's global seed state.
    def epoch_order(epoch):
        return tf.random.experimental.stateless_shuffle(
            tf.range(n, dtype=tf.int32), seed=tf.stack([tf.constant(seed, tf.int64), epoch])
        )

    def gather(idx):
        return tf.gather(images, idx), tf.gather(labels, idx)

    start_epoch, offset = divmod(start_step * batch, n)
    ds = tf.data.Dataset.counter(start=start_epoch, dtype=tf.int64).map(epoch_order).unbatch().skip(offset)
    # Batching after the epoch stream means batches may straddle epochs, so none is ever dropped short.
    ds = ds.batch(batch, drop_remainder=True).map(gather, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


def sample_noise(seed, step, batch, noise_dim, num_classes):
    """One step's generator inputs: z uniform in [-1, 1] [batch, noise_dim] and uniform labels [batch].

    A pure function of (seed, step): a resumed run, and any number of replicas, draw the same noise.
    """
    key = tf.stack([tf.cast(seed, tf.int64), tf.cast(step, tf.int64)])
    z_key, labels_key = tf.unstack(tf.random.experimental.stateless_split(key, 2))
    z = tf.random.stateless_uniform((batch, noise_dim), z_key, -1.0, 1.0)
    labels = tf.random.stateless_uniform((batch,), labels_key, 0, num_classes, dtype=tf.int32)
    return z, labels


def add_noise(batches, noise_dim, num_classes, seed, start_step=0):
    """(images, labels) batches -> (images, labels, z, fake_labels), step `start_step` first.

    The noise travels with its batch, so a distributed dataset hands each replica its own slice of both.
    """
    def add(batch, step):
        images, labels = batch
        return (images, labels) + sample_noise(seed, step, labels.shape[0], noise_dim, num_classes)

    steps = tf.data.Dataset.counter(start_step)
    return tf.data.Dataset.zip((batches, steps)).map(add).prefetch(tf.data.AUTOTUNE)
