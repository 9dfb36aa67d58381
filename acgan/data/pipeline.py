"""The trainer's input stream from an ImageSet, in tf.data: shuffled batches and G's noise, a pure
function of (seed, step), so a resumed run and any number of replicas see exactly the same batches."""
import tensorflow as tf

from acgan.data.image_set import ImageSet
from acgan.errors import UserError


def batch_indices(n, batch, seed, start_step=0):
    """Endless (step int64, indices int32 [batch]) into n items, from step `start_step` on.

    The stream is the concatenation of one permutation per epoch, a pure function of (seed, epoch), cut
    into consecutive batches; a batch may straddle two epochs, so none is ever dropped short. Each epoch
    computes its permutation (and the next one's head) once and slices its batches out of it: resuming
    at any step costs one permutation, not a walk over the skipped items.
    """
    seed = tf.constant(seed, tf.int64)

    def order(epoch):
        # Shuffle indices, not images; depends only on (seed, epoch), never on TF's global seed state.
        return tf.random.experimental.stateless_shuffle(tf.range(n, dtype=tf.int32), seed=tf.stack([seed, epoch]))

    def epoch_batches(epoch):
        both = tf.concat([order(epoch), order(epoch + 1)[:batch]], axis=0)
        first = tf.maximum((epoch * n + batch - 1) // batch, start_step)  # the first batch that starts here
        end = ((epoch + 1) * n + batch - 1) // batch
        return tf.data.Dataset.range(first, end).map(
            lambda step: (step, both[step * batch - epoch * n:step * batch - epoch * n + batch]))

    return tf.data.Dataset.counter(start=start_step * batch // n, dtype=tf.int64).flat_map(epoch_batches)


def _check_batch(batch, n):
    if batch < 1:
        raise UserError(f"batch size must be at least 1, got {batch}")
    if batch > n:
        raise UserError(f"batch size {batch} is larger than the dataset ({n} images); lower --batch or add images")


def _gather(data, batch):
    """indices [batch] -> (uint8 images [batch, H, W, C], int32 labels [batch]), read from the ImageSet's
    own arrays: no second copy of the data set in host memory (a tf.constant would make one)."""
    def gather(idx):
        images, labels = tf.numpy_function(lambda i: (data.images[i], data.labels[i]), [idx],
                                           (tf.uint8, tf.int32), stateful=False)
        images.set_shape((batch,) + tuple(data.image_shape))
        labels.set_shape((batch,))
        return images, labels

    return gather


def make_pipeline(data: ImageSet, batch: int, seed: int, start_step: int = 0) -> tf.data.Dataset:
    """Endless (uint8 images [batch,H,W,C], int32 labels [batch]) batches, reshuffled every epoch from `seed`.

    `start_step` resumes the same stream after that many batches.
    """
    _check_batch(batch, len(data))
    gather = _gather(data, batch)
    ds = batch_indices(len(data), batch, seed, start_step)
    return ds.map(lambda step, idx: gather(idx), num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def training_batches(data: ImageSet, batch: int, seed: int, noise_dim: int, start_step: int = 0) -> tf.data.Dataset:
    """Endless (images, labels, z, fake_labels) global batches from step `start_step` on: make_pipeline's
    batches with each step's generator noise (sample_noise), made together in one parallel map.

    The noise travels with its batch, so a distributed dataset hands each replica its own slice of both.
    """
    _check_batch(batch, len(data))
    gather = _gather(data, batch)

    def inputs(step, idx):
        return gather(idx) + sample_noise(seed, step, batch, noise_dim, data.num_classes)

    ds = batch_indices(len(data), batch, seed, start_step)
    return ds.map(inputs, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).prefetch(tf.data.AUTOTUNE)


def sample_noise(seed, step, batch, noise_dim, num_classes):
    """One step's generator inputs: z uniform in [-1, 1] [batch, noise_dim] and uniform labels [batch].

    A pure function of (seed, step): a resumed run, and any number of replicas, draw the same noise.
    """
    key = tf.stack([tf.cast(seed, tf.int64), tf.cast(step, tf.int64)])
    z_key, labels_key = tf.unstack(tf.random.experimental.stateless_split(key, 2))
    z = tf.random.stateless_uniform((batch, noise_dim), z_key, -1.0, 1.0)
    labels = tf.random.stateless_uniform((batch,), labels_key, 0, num_classes, dtype=tf.int32)
    return z, labels
