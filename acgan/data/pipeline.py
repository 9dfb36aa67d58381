"""The trainer's input stream on TensorFlow: data.batches' numpy batches through tf.data (made in
parallel, prefetched). The order and the noise are batches.BatchPlan's, the same on every backend."""

import tensorflow as tf

from acgan.data.batches import BatchPlan, training_batch
from acgan.data.image_set import ImageSet


def _stream(data, plan, start_step, with_noise):
    shape = (plan.batch,) + tuple(data.image_shape)

    def make(step):
        if with_noise:
            return training_batch(data, plan, int(step))
        idx = plan.indices(int(step))
        return data.images[idx], data.labels[idx]

    types = (tf.uint8, tf.int32) + ((tf.float32, tf.int32) if with_noise else ())
    shapes = (shape, (plan.batch,)) + (
        ((plan.batch, plan.noise_dim), (plan.batch,)) if with_noise else ()
    )

    def inputs(step):
        tensors = tf.numpy_function(make, [step], types, stateful=False)
        for tensor, known in zip(tensors, shapes):
            tensor.set_shape(known)
        return tuple(tensors)

    return (
        tf.data.Dataset.counter(start=start_step, dtype=tf.int64)
        .map(inputs, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def make_pipeline(data: ImageSet, batch: int, seed: int, start_step: int = 0) -> tf.data.Dataset:
    """Endless (uint8 images [batch,H,W,C], int32 labels [batch]) batches, reshuffled every epoch from `seed`.

    `start_step` resumes the same stream after that many batches.
    """
    return _stream(data, BatchPlan(len(data), batch, seed), start_step, with_noise=False)


def training_batches(
    data: ImageSet, batch: int, seed: int, noise_dim: int, start_step: int = 0
) -> tf.data.Dataset:
    """Endless (images, labels, z, fake_labels) global batches from step `start_step` on (batches.py).

    The noise travels with its batch, so a distributed dataset hands each replica its own slice of both.
    """
    return _stream(
        data,
        BatchPlan(len(data), batch, seed, noise_dim, data.num_classes),
        start_step,
        with_noise=True,
    )
