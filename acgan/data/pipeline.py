"""The trainer's input stream on TensorFlow: data.batches' numpy batches through tf.data (made in
parallel, prefetched). The order and the noise are batches.BatchPlan's, the same on every backend."""

import tensorflow as tf

from acgan.data.batches import BatchPlan, training_batch
from acgan.data.image_set import ImageSet


def training_batches(
    data: ImageSet, batch: int, seed: int, noise_dim: int, start_step: int = 0
) -> tf.data.Dataset:
    """Endless (images, labels, z, fake_labels) global batches from step `start_step` on (batches.py).

    The noise travels with its batch, so a distributed dataset hands each replica its own slice of both.
    """
    plan = BatchPlan(len(data), batch, seed, noise_dim, data.num_classes)
    shapes = (
        (batch,) + tuple(data.image_shape),
        (batch,),
        (batch, noise_dim),
        (batch,),
    )

    def inputs(step):
        tensors = tf.numpy_function(
            lambda step: training_batch(data, plan, int(step)),
            [step],
            (tf.uint8, tf.int32, tf.float32, tf.int32),
            stateful=False,
        )
        for tensor, known in zip(tensors, shapes):
            tensor.set_shape(known)
        return tuple(tensors)

    return (
        tf.data.Dataset.counter(start=start_step, dtype=tf.int64)
        .map(inputs, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .prefetch(tf.data.AUTOTUNE)
    )
