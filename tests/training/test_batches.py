"""The batches both backends train on: the TensorFlow pipeline (tf.data) and the JAX runtime's host thread
give every step the same images, labels and noise."""

import numpy as np

from acgan.data.batches import BatchPlan, prefetched, sample_noise, training_batch
from acgan.data.image_set import ImageSet


def test_both_backends_feed_the_same_batches():
    """The TensorFlow pipeline (tf.data, parallel map) and JAX's host thread give every step the same
    images, labels and noise, resumed mid-stream too, batches straddling epochs included."""
    from acgan.data.pipeline import training_batches

    rng = np.random.default_rng(0)
    data = ImageSet(
        rng.integers(0, 256, (23, 8, 8, 1), dtype=np.uint8),
        rng.integers(0, 3, 23).astype(np.int32),
        ["a", "b", "c"],
    )
    plan = BatchPlan(len(data), 5, 7, noise_dim=4, num_classes=3)
    for start in (0, 3):
        tf_stream = iter(training_batches(data, 5, 7, 4, start_step=start))
        jax_like = prefetched(data, plan, start, put=lambda batch: batch)
        for step in range(start, start + 12):
            expected = training_batch(data, plan, step)
            for got in (next(tf_stream), next(jax_like)):
                for a, b in zip(got, expected):
                    np.testing.assert_array_equal(np.asarray(a), b)
        jax_like.close()
        del tf_stream
    # Each batch is its step's items in class order (the order D's minibatch spread groups by), with the
    # images still beside their own labels; G's labels in order too, its noise as drawn.
    for step in range(6):
        images, labels, z, fake_labels = training_batch(data, plan, step)
        assert sorted(i.tobytes() for i in images) == sorted(
            data.images[i].tobytes() for i in plan.indices(step)
        )
        assert list(labels) == sorted(data.labels[plan.indices(step)])
        assert all(
            any(
                np.array_equal(image, data.images[i]) and label == data.labels[i]
                for i in plan.indices(step)
            )
            for image, label in zip(images, labels)
        )
        expected_z, expected_fake = sample_noise(
            plan.seed, step, plan.batch, plan.noise_dim, plan.num_classes
        )
        np.testing.assert_array_equal(z, expected_z)
        assert list(fake_labels) == sorted(expected_fake)
    # Every epoch is a permutation: 23 items, batches of 5, so step 4 straddles epochs 0 and 1.
    assert sorted(
        np.concatenate([plan.indices(s) for s in range(4)]).tolist() + plan.indices(4)[:3].tolist()
    ) == list(range(23))
