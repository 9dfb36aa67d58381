"""Mixed precision checked by numbers, not plumbing: from identical weights and one batch, the gradients
each optimizer applies on the first step under mixed_float16 and mixed_bfloat16 agree with float32's.

Adam's first moment after one step is (1 - beta_1) * gradient, so it holds the unscaled gradient the
optimizer actually applied. Each optimizer's loss scale is pinned to its own modest value (no overflow,
so no skipped step, and a scale used by the wrong optimizer changes a norm by 4x or more). D's learning
rate is 0 for this step, so G and Q see the very weights float32's G and Q see (with D's step taken,
Adam's first update moves every D weight by +-lr whatever the gradient's size, and the sign of a
gradient that is mostly rounding differs between policies).

Compared per optimizer (all of D's, all of G's, all of Q's variables concatenated), not per tensor: at
initialization some tensors' low-precision gradients are mostly rounding. The biases directly before a
batch norm are left out: their true gradient is zero (BN subtracts the mean), so theirs is pure noise.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from acgan.data.batches import sample_noise
from acgan.model import networks, precision
from acgan.step import tf_step

WIDTH, BATCH, SEED = 0.125, 32, 0
# distinct, so a scale used by the wrong optimizer shows
PINNED_SCALES = {
    "d": 64.0,
    "g": 256.0,
    "q": 1024.0,
}
BIASES_BEFORE_BATCH_NORM = ("g_fc1", "g_fc2", "g_deconv1", "d_conv2", "d_fc3", "q_fc1")

# Measured with _first_step below on seeds 0-9 (weights and batch), width 0.125, batch 32, XLA off, this
# 2-core EPYC: cosine to float32's first moments and norm ratio mixed / float32, worst seed of ten.
#   mixed_float16   d: cos >= 0.971, ratio 0.967-1.130   g: cos >= 0.959, ratio 0.987-1.006
#                   q: cos >= 0.971, ratio 0.985-1.085
#   mixed_bfloat16  d: cos >= 0.755, ratio 0.646-1.154   g: cos >= 0.731, ratio 0.965-1.027
#                   q: cos >= 0.844, ratio 0.813-1.020
# (bfloat16 keeps 8 bits of mantissa to float16's 11, hence its lower agreement.) The bounds leave
# margin below the worst seed; a loss-scale bug moves a norm by the ratio of two pinned scales (4x here)
# or by a whole scale (>= 64x), far outside them, and an update at cosine 0.4 fails both policies.
BOUNDS = {  # policy: (minimum cosine, (lowest, highest) norm ratio)
    "mixed_float16": (0.9, (0.75, 1.33)),
    "mixed_bfloat16": (0.6, (0.5, 1.5)),
}


def _batch(seed=SEED, n=BATCH):
    rng = np.random.default_rng(seed)
    return (
        tf.constant(rng.integers(0, 256, (n, 28, 28, 1), dtype=np.uint8)),
        tf.constant(rng.integers(0, 10, n, dtype=np.int32)),
    ) + sample_noise(seed, 0, n, networks.NOISE_DIM, 10)


def _optimizers(trainer):
    return dict(zip("dgq", (trainer.d_optimizer, trainer.g_optimizer, trainer.q_optimizer)))


def _first_moments(trainer):
    """{optimizer name: its first moments concatenated}, biases before a batch norm left out."""
    out = {}
    for name, (optimizer, variables) in zip("dgq", trainer._optimizers_and_variables()):
        adam = optimizer.inner_optimizer if precision.is_loss_scaled(optimizer) else optimizer
        momenta = [v for v in adam.variables if v.path.endswith("_momentum")]
        assert len(momenta) == len(variables)
        out[name] = np.concatenate(
            [
                m.numpy().ravel()
                for v, m in zip(variables, momenta)
                if not (
                    v.path.endswith("/bias") and v.path.split("/")[-2] in BIASES_BEFORE_BATCH_NORM
                )
            ]
        )
    return out


def _first_step(policy, weights, seed=SEED, breakage=None, monkeypatch=None):
    """One step under `policy` from `weights` (a list per model): (_first_moments, {name: skipped}).

    `breakage` names a loss-scaling bug to inject, for showing that the check catches it."""
    precision.set_policy(policy)
    models = networks.build_models((28, 28, 1), 10, width=WIDTH)
    for model, values in zip(models, weights):
        model.set_weights(values)
    trainer = tf_step.TensorFlowStep(models, 10, jit=False)
    trainer.d_optimizer.learning_rate.assign(0.0)  # G and Q see the same D as float32's G and Q
    optimizers = _optimizers(trainer)
    for name, optimizer in optimizers.items():
        if precision.is_loss_scaled(optimizer):
            optimizer.dynamic_scale.assign(PINNED_SCALES[name])
    if breakage:
        _break(trainer, breakage, monkeypatch)
    d_head_before = [v.numpy() for v in models.d_head.trainable_variables]  # only D trains it
    metrics = trainer.train_step(*_batch(seed))
    for old, variable in zip(d_head_before, models.d_head.trainable_variables):
        np.testing.assert_array_equal(old, variable.numpy())
    return _first_moments(trainer), {n: int(metrics[f"{n}_skipped"]) for n in "dgq"}


def _break(trainer, breakage, monkeypatch):
    honest_scale_loss = precision.scale_loss
    if breakage == "scaled twice":
        monkeypatch.setattr(
            tf_step.precision,
            "scale_loss",
            lambda optimizer, loss: honest_scale_loss(
                optimizer, honest_scale_loss(optimizer, loss)
            ),
        )
    elif breakage == "never unscaled":

        def apply_without_unscaling(optimizer, grads, variables):
            inner = optimizer.inner_optimizer if precision.is_loss_scaled(optimizer) else optimizer
            inner.apply(grads, variables)

        monkeypatch.setattr(trainer, "_apply", apply_without_unscaling)
    elif breakage == "G scaled by Q's optimizer":  # and unscaled by G's: off by 1024 / 256
        monkeypatch.setattr(
            tf_step.precision,
            "scale_loss",
            lambda optimizer, loss: honest_scale_loss(
                trainer.q_optimizer if optimizer is trainer.g_optimizer else optimizer, loss
            ),
        )
    else:
        raise ValueError(breakage)
    trainer.retrace()


def _cosine(a, b):
    norms = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / norms) if norms else 0.0  # a skipped step leaves the moments at zero


def _disagreements(policy, reference, got):
    """The optimizers whose applied gradient is off float32's: [(name, cosine, norm ratio)]."""
    min_cosine, (low, high) = BOUNDS[policy]
    out = []
    for name in "dgq":
        cosine = _cosine(reference[name], got[name])
        ratio = float(np.linalg.norm(got[name]) / np.linalg.norm(reference[name]))
        if not (cosine > min_cosine and low < ratio < high):
            out.append((name, round(cosine, 4), round(ratio, 4)))
    return out


@pytest.fixture(scope="module")
def float32_run():
    """Initial weights (seeded) and float32's first moments from them."""
    with precision.float32_policy():
        keras.utils.set_random_seed(SEED)
        weights = [
            model.get_weights() for model in networks.build_models((28, 28, 1), 10, width=WIDTH)
        ]
        reference, _ = _first_step("float32", weights)
    return weights, reference


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_first_step_gradients_agree_with_float32(policy, float32_run, set_policy):
    weights, reference = float32_run
    got, skipped = _first_step(policy, weights)
    assert skipped == {"d": 0, "g": 0, "q": 0}
    assert _disagreements(policy, reference, got) == []


@pytest.mark.parametrize(
    "breakage, victims",
    [
        ("scaled twice", {"d", "g", "q"}),
        ("never unscaled", {"d", "g", "q"}),
        ("G scaled by Q's optimizer", {"g"}),
    ],
    ids=["scaled_twice", "never_unscaled", "wrong_optimizer"],
)
@pytest.mark.slow
def test_the_check_rejects_broken_loss_scaling(
    breakage, victims, float32_run, set_policy, monkeypatch
):
    weights, reference = float32_run
    # Scaled twice, Q's loss (x 1024^2) overflows float16 and its step is skipped: zero moments, also caught.
    got, _ = _first_step("mixed_float16", weights, breakage=breakage, monkeypatch=monkeypatch)
    assert {name for name, _, _ in _disagreements("mixed_float16", reference, got)} == victims


def test_under_xla_bfloat16_convolutions_add_up_in_float32():
    """The reason the advice says "keep XLA on" for mixed_bfloat16 on CPUs without bfloat16 hardware: XLA
    adds up a bfloat16 convolution's filter gradient (here 32 x 14 x 14 terms per weight) in float32, so
    it is off float64's by at most about one bfloat16 rounding of the result (2^-8 relative). TensorFlow's
    own kernels on an AVX2-only CPU add up in bfloat16 and were 6.7% off on this case (docs/development.md,
    Framework facts); that depends on the CPU, so only the XLA side is asserted."""
    rng = np.random.default_rng(0)
    x, dy = rng.uniform(0, 1, (32, 14, 14, 64)), rng.uniform(0, 1, (32, 7, 7, 128))

    def filter_gradient(x, dy):
        return tf.compat.v1.nn.conv2d_backprop_filter(x, [5, 5, 64, 128], dy, [1, 2, 2, 1], "SAME")

    exact = filter_gradient(tf.constant(x, tf.float64), tf.constant(dy, tf.float64)).numpy()
    xla = tf.function(filter_gradient, jit_compile=True)(
        tf.constant(x, tf.bfloat16), tf.constant(dy, tf.bfloat16)
    )
    error = np.abs(xla.numpy().astype(np.float64) - exact).max() / np.abs(exact).max()
    assert error < 2**-7, error
