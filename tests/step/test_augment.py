"""DiffAugment (acgan.step.augment): the draws both backends share, each transformation, and the step
feeding D's trunk augmented images while G's samples stay unaugmented.

Sizes: the step's test runs the smallest acgan_cifar networks (width 0.125) on a batch of 16: D's losses
with and without the augmentation then differ by 8.6e-4 (float32; 8.3e-4 mixed_bfloat16), 8x the 1e-4
the test asks (on a batch of 8: 7.7e-5 and 8.4e-5, under it)."""

import keras
import numpy as np
import pytest

from acgan.step import augment


def _lowbias32(x):
    """The hash in plain uint32 arithmetic (Python ints), to check the int32 version against."""
    x &= 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


def test_the_hash_is_lowbias32_and_the_draws_are_uniform_and_keyed_by_step_salt_and_image():
    values = np.array([0, 1, 15, 123456789, 2**31 - 1, -1], np.int32)
    got = np.asarray(augment._hash(values)).astype(np.int64) & 0xFFFFFFFF
    assert got.tolist() == [_lowbias32(int(v)) for v in values]

    u = np.asarray(augment.draws(np.int32(3), 64, augment.REAL))
    assert u.shape == (64, augment.DRAWS) and u.dtype == np.float32 and 0 <= u.min() and u.max() < 1
    # no state
    np.testing.assert_array_equal(u, np.asarray(augment.draws(np.int32(3), 64, augment.REAL)))
    for other in (
        augment.draws(np.int32(3), 64, augment.FAKE),
        augment.draws(np.int32(4), 64, augment.REAL),
    ):
        assert np.mean(np.asarray(other) == u) < 0.01
    # A replica's share (offset) draws what the same images draw in the whole batch.
    np.testing.assert_array_equal(
        np.asarray(augment.draws(np.int32(3), 24, augment.REAL, offset=40)), u[40:]
    )
    many = np.concatenate(
        [np.asarray(augment.draws(np.int32(s), 64, salt)) for s in range(100) for salt in (0, 1)]
    )
    counts, _ = np.histogram(many, bins=10, range=(0, 1))
    assert np.all(np.abs(counts / many.size - 0.1) < 0.01)  # 89,600 draws: 0.1 +- 0.001 per bin
    off_diagonal = np.corrcoef(many.T)[~np.eye(augment.DRAWS, dtype=bool)]
    assert np.abs(off_diagonal).max() < 0.03


def _images(n=4, side=16, seed=0):
    return np.random.default_rng(seed).uniform(0, 1, (n, side, side, 3)).astype(np.float32)


def test_middle_draws_change_nothing_and_each_transformation_does_what_it_says():
    x = _images()
    middle = np.full((4, augment.DRAWS), 0.5, np.float32)  # no shift, factors 1, brightness +0
    same = np.asarray(augment.augment(x, middle, ("color", "translation")))
    np.testing.assert_allclose(same, x, atol=1e-6)

    u = middle.copy()
    u[:, 3], u[:, 4] = 0.0, 0.999  # a 16-pixel side reaches 2 pixels each way: the extremes
    # output pixel (i, j) is input (i - 2, j + 2)
    moved = np.asarray(augment.augment(x, u, ("translation",)))
    np.testing.assert_allclose(moved[:, 2:, :-2], x[:, :-2, 2:], atol=1e-6)
    np.testing.assert_allclose(moved[:, :2], 0.5, atol=1e-6)  # from outside the image: mid-grey
    np.testing.assert_allclose(moved[:, :, -2:], 0.5, atol=1e-6)

    cut = np.asarray(augment.augment(x, u, ("cutout",)))
    grey = np.all(cut == 0.5, axis=-1)
    assert np.all(grey.sum(axis=(1, 2)) <= 8 * 8) and np.all(grey.sum(axis=(1, 2)) >= 4 * 4)
    np.testing.assert_array_equal(cut[~grey], x[~grey])

    u = middle.copy()
    u[:, 0], u[:, 1], u[:, 2] = 1.0, 0.0, 0.5  # brightness +0.25, no saturation
    coloured = np.asarray(augment.augment(x, u, ("color",)))
    np.testing.assert_allclose(
        coloured, np.repeat(x.mean(axis=3, keepdims=True), 3, axis=3) + 0.25, atol=1e-5
    )


def test_the_gradient_is_the_transformation_run_backwards():
    """Shifted pixels pass their gradient back to where they came from; pixels pushed out get none."""
    import tensorflow as tf

    x = tf.constant(_images(n=2))
    u = np.full((2, augment.DRAWS), 0.5, np.float32)
    u[:, 3] = 0.999  # output row i is input row i + 2
    weights = tf.constant(np.random.default_rng(1).normal(size=(2, 16, 16, 3)).astype(np.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(augment.augment(x, u, ("translation",)) * weights)
    gradient = tape.gradient(loss, x).numpy()
    np.testing.assert_allclose(gradient[:, 2:], weights.numpy()[:, :-2], atol=1e-6)
    np.testing.assert_array_equal(gradient[:, :2], 0)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_the_preset_step_trains_d_on_augmented_images_and_samples_stay_unaugmented(
    policy, set_policy
):
    import dataclasses

    from acgan import presets
    from acgan.data.batches import sample_noise
    from acgan.model import networks
    from acgan.step.factory import build_step

    assert presets.REFERENCE.augment is None and presets.ACGAN_CIFAR.augment == augment.POLICY
    set_policy(policy)
    rng = np.random.default_rng(0)
    batch = (
        rng.integers(0, 256, (16, 32, 32, 3), dtype=np.uint8),
        rng.integers(0, 10, 16).astype(np.int32),
        *sample_noise(1, 0, 16, 100, 10),
    )
    d_losses, samples = [], []
    for preset in (presets.ACGAN_CIFAR, dataclasses.replace(presets.ACGAN_CIFAR, augment=None)):
        keras.utils.set_random_seed(5)
        models = networks.build_models((32, 32, 3), 10, width=0.125, arch="acgan_cifar")
        trainer = build_step(preset, "tensorflow", models, 10, jit=False)
        # the step the factory builds for the preset takes its policy
        assert trainer.augment == preset.augment
        samples.append(np.asarray(trainer.generate(*batch[2:])))
        metrics = trainer.train_step(*batch).read()
        assert np.isfinite(list(metrics.values())).all()
        d_losses.append(metrics["d_loss"])
    # the same weights: sampling does not augment
    np.testing.assert_array_equal(samples[0], samples[1])
    assert abs(d_losses[0] - d_losses[1]) > 1e-4  # D saw other images with the augmentation
