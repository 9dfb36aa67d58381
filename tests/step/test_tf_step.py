"""The TensorFlow step: one G forward per iteration, batch-norm statistics that move once per batch,
and metrics as one vector read with one host copy; the policy taken from the models.

Sizes: width 0.125 and batch 16, small networks on a small batch; what is checked (which statistics move
and how often, which weights an update reaches, the metrics' layout) does not depend on them. Tracing a
trainer's step is most of a test's cost, so a test that compares two steps runs both on one trainer,
restarting it from its saved state (overflow_injection.save_state)."""

import dataclasses

import keras
import numpy as np
import overflow_injection
import pytest

from acgan import presets
from acgan.data.batches import sample_noise
from acgan.model.blocks import BN_MOMENTUM
from acgan.model.networks import build_models
from acgan.step.tf_step import METRIC_NAMES, TensorFlowStep


def _trainer(jit):
    keras.utils.set_random_seed(3)
    return TensorFlowStep(build_models((28, 28, 1), 10, width=0.125), 10, jit=jit)


def _batch(n=16):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (n, 28, 28, 1), dtype=np.uint8)
    labels = rng.integers(0, 10, n).astype(np.int32)
    return (images, labels) + sample_noise(1, 0, n, 62, 10)


def _batch_mean(model, layer, inputs):
    """Mean over the batch of what `layer` (a batch norm) receives, before the step changes any weight.
    In a StatelessScope, so the batch norms on the way keep their moving statistics."""
    source = keras.Model(model.inputs, model.get_layer(layer).input)
    with keras.StatelessScope():
        return np.mean(np.asarray(source(inputs, training=True), np.float64), axis=0)


@pytest.fixture(scope="module")
def xla_trainer():
    """The float32 trainer compiled by XLA, and its initial state: built and compiled once for the two
    tests that step one (each restarts it from that state)."""
    from acgan.model import precision

    with precision.float32_policy():
        trainer = _trainer(jit=True)
    return trainer, overflow_injection.save_state(trainer)


@pytest.mark.slow
@pytest.mark.parametrize("policy,jit", [("float32", True), ("mixed_float16", False)])
def test_g_batch_norm_moves_once_per_step_with_momentum_0_9(policy, jit, set_policy, request):
    set_policy(policy)
    if jit:  # the shared one, as built
        trainer, initial = request.getfixturevalue("xla_trainer")
        overflow_injection.restore_state(trainer, initial)
    else:
        trainer = _trainer(jit)
    images, labels, z, fake_labels = _batch()
    g = trainer.models.generator
    expected = {
        name: (1 - BN_MOMENTUM) * _batch_mean(g, name, [z, fake_labels])
        for name in ("g_bn1", "g_bn2")
    }
    trainer.train_step(images, labels, z, fake_labels).read()
    for name, mean in expected.items():
        # Moved twice (G run twice) it would be 0.19 * mean instead of 0.1 * mean.
        np.testing.assert_allclose(
            g.get_layer(name).moving_mean.numpy(), mean, rtol=2e-2, atol=1e-6, err_msg=name
        )


@pytest.mark.slow
def test_trunk_batch_norm_moves_once_for_the_real_and_once_for_the_fake_batch_and_metrics_are_one_vector(
    set_policy,
):
    """One float32 step (its trainer built and traced once for both checks): the trunk's statistics, and
    the step's metrics as one vector read at once."""
    set_policy("float32")
    trainer = _trainer(jit=False)
    images, labels, z, fake_labels = _batch()
    trunk, g = trainer.models.trunk, trainer.models.generator
    real = images.astype(np.float32) / 255.0
    with keras.StatelessScope():
        fake = np.asarray(g([z, fake_labels], training=True))
    m_real, m_fake = (_batch_mean(trunk, "d_bn3", x) for x in (real, fake))
    metrics = trainer.train_step(images, labels, z, fake_labels)
    # D's pass: trunk(real) then trunk(fake), from a zero start; G/Q's pass adds nothing.
    expected = (1 - BN_MOMENTUM) * (BN_MOMENTUM * m_real + m_fake)
    np.testing.assert_allclose(
        trunk.get_layer("d_bn3").moving_mean.numpy(), expected, rtol=2e-2, atol=1e-6
    )
    # The metrics: one vector, read with one host copy.
    assert metrics.vector.shape == (len(METRIC_NAMES),)
    values = metrics.read()
    assert list(values) == list(METRIC_NAMES)
    assert float(metrics["d_loss"]) == values["d_loss"] and values["d_skipped_in_a_row"] == 0.0
    # float32 scales no loss (moved here from test_loss_scaling's test_no_loss_scaling_outside_float16)
    assert values["d_loss_scale"] == 1.0 and values["q_skipped"] == 0.0


@pytest.mark.parametrize("policy", ["float32", "mixed_float16"])
def test_q_learns_from_real_images_only_when_told_and_g_still_gets_the_fake_class_loss(
    policy, set_policy
):
    """q_learns_from_fakes=False (acgan_cifar): the trunk's and Q head's gradients are those of the real
    batch's class loss alone; the cotangent that moves G (the fake batch's class loss) is unchanged."""
    import tensorflow as tf

    from acgan.step import algorithm, losses

    set_policy(policy)
    images, labels, z, fake_labels = _batch()
    real = tf.constant(images.astype(np.float32) / 255.0)
    results = {}
    for from_fakes in (True, False):
        trainer = _trainer(jit=False)
        if (
            policy == "mixed_float16"
        ):  # the first scale (2^15) overflows float16 here: the step would skip it
            trainer.q_optimizer.dynamic_scale.assign(64.0)
        fake = trainer.models.generator([z, fake_labels], training=False)
        results[from_fakes] = algorithm.g_and_q_gradients(
            trainer, real, tf.constant(labels), fake, tf.constant(fake_labels), from_fakes
        )
    m = trainer.models  # the same seeded weights as both runs
    scale = (
        float(tf.convert_to_tensor(trainer.q_optimizer.dynamic_scale))
        if policy == "mixed_float16"
        else 1.0
    )
    variables = m.trunk.trainable_variables + m.q_head.trainable_variables
    with tf.GradientTape() as tape:
        with keras.StatelessScope():
            real_loss = losses.ce(labels, m.q_head(m.trunk(real, training=True), training=True))
    expected = tape.gradient(real_loss, variables)
    for from_fakes, rtol in ((False, 2e-2 if policy != "float32" else 1e-5), (True, None)):
        got = [np.asarray(g, np.float64) / scale for g in results[from_fakes].q_grads]
        difference = max(float(np.abs(a - np.asarray(b)).max()) for a, b in zip(got, expected))
        size = max(float(np.abs(np.asarray(b)).max()) for b in expected)
        if rtol:  # from real images only: the real batch's gradient
            assert difference <= rtol * size, (difference, size)
        else:  # from both batches: the fake batch's class loss adds to it
            assert difference > 0.05 * size, (difference, size)
    np.testing.assert_allclose(
        np.asarray(results[False].q_cotangent),
        np.asarray(results[True].q_cotangent),
        rtol=1e-6,
        atol=1e-12,
    )
    np.testing.assert_allclose(
        np.asarray(results[False].q_loss), np.asarray(results[True].q_loss), rtol=1e-6
    )


@pytest.mark.slow
@pytest.mark.parametrize("g_learns_from_q", [True, False])
def test_without_g_learns_from_q_the_class_loss_does_not_reach_g(g_learns_from_q, set_policy):
    """g_learns_from_q=False (acgan_cifar): Q's optimizer holds the trunk and Q head only, and G's update
    does not depend on Q's head at all (its class arrives through D); with True, changing Q's head changes
    G's update (the AC-GAN class term). Q's metrics on the fake batch are still reported."""
    set_policy("float32")
    batch = _batch()

    keras.utils.set_random_seed(3)
    preset = dataclasses.replace(
        presets.REFERENCE, q_learns_from_fakes=False, g_learns_from_q=g_learns_from_q
    )
    trainer = TensorFlowStep(build_models((28, 28, 1), 10, width=0.125), 10, preset, jit=False)
    initial = overflow_injection.save_state(trainer)  # one trainer (one trace) for both steps

    def g_after_one_step(q_head_factor):
        overflow_injection.restore_state(trainer, initial)
        for variable in trainer.models.q_head.trainable_variables:
            variable.assign(variable * q_head_factor)
        values = trainer.train_step(*batch).read()
        assert np.isfinite(values["q_accuracy_fake"]) and values["q_loss"] > 0
        return [np.asarray(v) for v in trainer.models.generator.trainable_variables]

    g = g_after_one_step(1.0)
    g_other_q = g_after_one_step(3.0)
    m = trainer.models
    in_q = {id(v) for v in trainer.q_variables}
    assert all(id(v) in in_q for v in m.trunk.trainable_variables + m.q_head.trainable_variables)
    assert any(id(v) in in_q for v in m.generator.trainable_variables) == g_learns_from_q
    difference = max(float(np.abs(a - b).max()) for a, b in zip(g, g_other_q))
    if g_learns_from_q:
        assert difference > 1e-5
    else:
        assert difference == 0.0


@pytest.mark.slow
def test_learning_rate_scale_sets_every_optimizers_rate_and_zero_stops_the_weights(
    set_policy, xla_trainer
):
    """set_learning_rate_scale(f): each optimizer's rate is its preset rate times f, read by the compiled
    step without a retrace; at 0 a step leaves every trainable weight where it was."""
    from acgan.model import precision

    set_policy("mixed_float16")  # through the loss-scale wrappers
    trainer = _trainer(jit=False)
    trainer.set_learning_rate_scale(0.25)
    optimizers = [optimizer for optimizer, _ in trainer._optimizers_and_variables()]
    np.testing.assert_allclose(
        [float(precision.learning_rate_variable(o).numpy()) for o in optimizers],
        [rate * 0.25 for rate in trainer.learning_rates],
        rtol=1e-6,
    )
    assert trainer.learning_rate_scale == 0.25
    set_policy("float32")  # no loss scaling: no step is skipped for an overflow below
    trainer, initial = xla_trainer
    overflow_injection.restore_state(trainer, initial)
    trainer.train_step(*_batch()).read()  # compiled at the full rates
    trainer.set_learning_rate_scale(0.0)
    models = trainer.models
    before = [np.asarray(v).copy() for m in models for v in m.trainable_variables]
    skipped = trainer.skipped_steps()
    trainer.train_step(*_batch()).read()
    assert trainer.skipped_steps() == skipped  # each optimizer applied this step: at a rate of zero
    after = [np.asarray(v) for m in models for v in m.trainable_variables]
    assert all(np.array_equal(a, b) for a, b in zip(before, after))
    trainer.set_learning_rate_scale(1.0)
    trainer.train_step(*_batch()).read()
    assert any(
        not np.array_equal(a, np.asarray(v))
        for a, v in zip(after, [v for m in models for v in m.trainable_variables])
    )


def test_the_step_takes_the_policy_its_models_were_built_under(set_policy):
    """One channel for the policy: the models carry it, and a step over models built under two is refused."""
    from acgan.model import precision

    set_policy("mixed_float16")
    mixed = build_models((28, 28, 1), 10, width=0.125)
    trainer = TensorFlowStep(mixed, 10, jit=False)
    assert trainer.policy == "mixed_float16" and precision.is_loss_scaled(trainer.d_optimizer)
    set_policy("float32")
    plain = build_models((28, 28, 1), 10, width=0.125)
    trainer = TensorFlowStep(plain, 10, jit=False)
    assert trainer.policy == "float32" and not precision.is_loss_scaled(trainer.d_optimizer)
    with pytest.raises(ValueError, match="different dtype policies"):
        TensorFlowStep(mixed._replace(generator=plain.generator), 10, jit=False)
