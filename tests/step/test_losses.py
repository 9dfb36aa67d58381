"""D's and G's real/fake losses (acgan.step.losses), the --loss setting that picks one, and the checks
a run and a resume make on it."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from acgan import presets
from acgan.config import Config
from acgan.errors import UserError
from acgan.step import losses
from acgan.training import run_dir as run_dirs

LOGITS = np.array([[-2.0], [-0.5], [0.5], [2.0]], np.float32)


def test_the_nonsaturating_loss_is_the_ac_gan_papers_binary_cross_entropy():
    real, fake = LOGITS, LOGITS[::-1] * 0.5
    sigmoid = 1 / (1 + np.exp(-LOGITS.astype(np.float64)))
    d_loss = float(losses.d_adversarial("nonsaturating", real, fake))
    expected = -np.mean(np.log(sigmoid)) - np.mean(
        np.log(1 - 1 / (1 + np.exp(-fake.astype(np.float64))))
    )
    assert d_loss == pytest.approx(expected, rel=1e-6)
    # G raises log D(G(z)): the same binary cross-entropy with the fakes labelled real.
    assert float(losses.g_adversarial("nonsaturating", LOGITS)) == pytest.approx(
        -np.mean(np.log(sigmoid)), rel=1e-6
    )


def test_the_hinge_loss_and_its_margins():
    # D: mean(relu(1 - real)) + mean(relu(1 + fake)) = mean(3, 1.5, 0.5, 0) + mean(0, 0.5, 1.5, 3).
    assert float(losses.d_adversarial("hinge", LOGITS, LOGITS)) == pytest.approx(1.25 + 1.25)
    assert float(losses.g_adversarial("hinge", LOGITS)) == pytest.approx(0.0)  # -mean of the logits
    real, fake = tf.Variable(LOGITS), tf.Variable(LOGITS)
    with tf.GradientTape() as tape:
        d_loss = losses.d_adversarial("hinge", real, fake)
    d_real, d_fake = tape.gradient(d_loss, [real, fake])
    # A real logit past +1 or a fake one past -1 is beyond the margin: no gradient; the others 1/batch each.
    np.testing.assert_allclose(d_real.numpy().ravel(), [-0.25, -0.25, -0.25, 0.0])
    np.testing.assert_allclose(d_fake.numpy().ravel(), [0.0, 0.25, 0.25, 0.25])
    with tf.GradientTape() as tape:
        g_loss = losses.g_adversarial("hinge", fake)
    # no saturation
    np.testing.assert_allclose(tape.gradient(g_loss, fake).numpy().ravel(), [-0.25] * 4)


def test_auto_is_the_presets_loss_and_a_step_takes_only_a_known_one():
    assert presets.adversarial_loss("acgan_cifar") == presets.ACGAN_CIFAR.loss
    assert presets.adversarial_loss("reference", "hinge") == "hinge"
    assert presets.ACGAN_CIFAR.with_loss("hinge").loss == "hinge"
    with pytest.raises(ValueError, match="unknown adversarial loss 'auto'"):
        presets.check_adversarial_loss("auto")


def test_config_round_trips_the_loss_and_a_resume_keeps_it(
    tmp_path,
):
    config = Config(dataset="swatches", arch="acgan_cifar", loss="hinge").validate()
    assert Config.from_json(config.to_json()).loss == "hinge"
    with pytest.raises(UserError, match="unknown loss 'wgan': choose auto, nonsaturating, hinge"):
        Config(loss="wgan").validate()
    saved = dataclasses.replace(config, output_dir=str(tmp_path))
    with pytest.raises(UserError, match="--loss 'hinge' -> 'nonsaturating'"):
        run_dirs.check_resumable(dataclasses.replace(saved, loss="nonsaturating"), saved, tmp_path)
