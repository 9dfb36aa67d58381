"""The models and the step on JAX, in this process: the acgan_cifar preset trains under every policy; the
fused batch norm's training step gives Keras's losses; XLA's count of the step's FLOPs agrees with the
layers' count; the step's moving average of G follows the ramped recurrence. (Each was a child process of
the TensorFlow session before; the numbers and bounds are the same.)"""

import dataclasses
import unittest.mock

import numpy as np
import pytest

from acgan import backend, presets
from acgan.data.batches import sample_noise
from acgan.measure import flops
from acgan.model import batch_norm, jax_formulations, networks
from acgan.step import base, jax_step
from acgan.step.factory import build_step
from conftest import POLICIES


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICIES)
def test_the_preset_trains_on_the_jax_backend(policy, set_policy):
    set_policy(policy)
    m = networks.build_models((32, 32, 3), 10, width=0.25, arch="acgan_cifar")
    # the preset's
    preset = dataclasses.replace(presets.REFERENCE, q_learns_from_fakes=False, beta_1=0.0)
    trainer = jax_step.JaxStep(m, 10, preset, jit=True)
    adam = trainer.g_optimizer.inner_optimizer if policy == "mixed_float16" else trainer.g_optimizer
    assert adam.beta_1 == 0.0
    u_before = [v.numpy().copy() for v in m.trunk.non_trainable_variables if "sn_u" in v.path]
    rng = np.random.default_rng(0)
    batch = (
        rng.integers(0, 256, (16, 32, 32, 3)).astype(np.uint8),
        rng.integers(0, 10, 16).astype(np.int32),
        rng.uniform(-1, 1, (16, trainer.noise_dim)).astype(np.float32),
        rng.integers(0, 10, 16).astype(np.int32),
    )
    for _ in range(2):
        values = trainer.train_step(*batch).read()
    images = np.asarray(trainer.generate(batch[2][:4], batch[3][:4]))
    assert images.shape == (4, 32, 32, 3) and images.dtype == np.float32, images.shape
    assert 0.0 <= images.min() and images.max() <= 1.0 and all(np.isfinite(list(values.values())))
    trainer.sync_variables()
    u_after = [v.numpy() for v in m.trunk.non_trainable_variables if "sn_u" in v.path]
    # power iteration ran
    assert len(u_before) == 6 and all(not np.allclose(a, b) for a, b in zip(u_after, u_before))


@pytest.mark.slow
def test_a_fused_jax_training_step_gives_keras_losses(set_policy, monkeypatch):
    """One training step of the reference model under mixed_float16 from the same state, in keras mode and
    in fused mode (the step retraced after switching): its losses and the batch norms' moving statistics."""
    set_policy("mixed_float16")
    models = networks.build_models((28, 28, 1), 10, width=0.125)
    trainer = jax_step.JaxStep(models, 10)
    rng = np.random.default_rng(0)
    batch = (
        rng.integers(0, 256, (16, 28, 28, 1), dtype=np.uint8),
        rng.integers(0, 10, 16).astype(np.int32),
        rng.uniform(-1, 1, (16, 62)).astype(np.float32),
        rng.integers(0, 10, 16).astype(np.int32),
    )
    start = trainer.state()
    out = {}
    batch_norm.fused_batch_norm.cache_clear()  # so what the fused mode builds shows below
    for mode in ("keras", "fused"):
        monkeypatch.setattr(jax_formulations, "batch_norm", lambda mode=mode: mode)
        trainer.load_state(start)
        trainer.retrace()
        losses = np.asarray(trainer.train_step(*batch).vector)[:3]
        moving = {k: np.asarray(v) for k, v in trainer.state().items() if "moving_" in k}
        out[mode] = {"losses": losses, "moving": moving}
    assert batch_norm.fused_batch_norm.cache_info().currsize > 0  # the fused path was traced
    keras_run, fused = out["keras"], out["fused"]
    # float32 ulps in a batch norm's output flip the float16 rounding of a few activations after it, and
    # those move what follows: measured 1.5e-5 at most in the losses, 1.1e-4 in Q's batch norm's moving
    # mean (the last in line; G's first ones are equal).
    assert np.all(np.isfinite(fused["losses"])), fused["losses"]
    np.testing.assert_allclose(fused["losses"], keras_run["losses"], rtol=1e-4)
    # 6 batch norms
    assert fused["moving"].keys() == keras_run["moving"].keys() and len(fused["moving"]) == 12
    for key, values in fused["moving"].items():
        reference = keras_run["moving"][key]
        assert np.linalg.norm(values - reference) <= 1e-3 * np.linalg.norm(reference), key


@pytest.mark.slow
def test_the_layers_count_agrees_with_xla_on_small_models(set_policy):
    """XLA's cost analysis of the compiled JAX step (every operation) against the layers' count (matrix
    products and convolutions): within 10%, on both presets; and XLA's count is the one used."""
    for arch, shape, batch in (("reference", (28, 28, 1), 16), ("acgan_cifar", (32, 32, 3), 8)):
        set_policy("float32")
        models = networks.build_models(shape, 10, width=0.25, arch=arch)
        preset = presets.PRESETS[arch]
        trainer = build_step(preset, "jax", models, 10)
        z, fake_labels = sample_noise(0, 0, batch, trainer.noise_dim, 10)
        images = np.random.RandomState(0).randint(0, 255, (batch,) + shape).astype(np.uint8)
        inputs = (images, np.arange(batch) % 10, z, fake_labels)
        xla = flops.xla_flops(trainer.lowered_step(*inputs).compile())
        layers = flops.step_flops_from_layers(
            models, batch, preset.q_learns_from_fakes, preset.g_learns_from_q
        )
        assert layers == pytest.approx(xla, rel=0.10), (arch, layers, xla)
        assert list(flops.count_step_flops(trainer, inputs, batch)) == [xla, "xla"], arch


@pytest.mark.slow
def test_the_jax_step_keeps_the_same_average():
    """G's moving average on JAX, of its weights and batch-norm statistics: the ramped recurrence
    min(decay, (1 + t) / (10 + t)) to float32 rounding; a state without it does not fit a step that keeps
    one; the state round-trips it; standing statistics over one batch make inference on it the
    training-mode pass (tests/step/test_ema.py checks the rest on TensorFlow)."""
    backend.set_random_seed(3)  # keras.utils.set_random_seed would import TensorFlow
    preset = dataclasses.replace(presets.REFERENCE, ema_decay=0.9)
    trainer = jax_step.JaxStep(
        networks.build_models((28, 28, 1), 10, width=0.125), 10, preset, jit=True
    )
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (16, 28, 28, 1), dtype=np.uint8)
    labels = rng.integers(0, 10, 16).astype(np.int32)
    z = rng.uniform(-1, 1, (16, 62)).astype(np.float32)
    variables = trainer.g_variables + trainer.g_statistics
    average = [v.numpy().astype(np.float64) for v in variables]
    for t in range(4):
        trainer.train_step(images, labels, z, labels).read()
        trainer.sync_variables()
        d = min(0.9, (1 + t) / (10 + t))
        average = [a * d + v.numpy() * (1 - d) for a, v in zip(average, variables)]
    got = trainer.ema_values() + trainer.ema_statistics_values()
    state = trainer.state()
    with pytest.raises(ValueError, match=r"state keys differ: missing \['ema/generator/"):
        trainer.load_state({k: v for k, v in state.items() if not k.startswith("ema/")})
    trainer.load_state(state)
    assert max(float(np.abs(g - a).max()) for g, a in zip(got, average)) < 1e-6
    assert sorted({str(v.dtype) for v in got}) == ["float32"]
    assert sum(k.startswith("ema/generator/") for k in state) == len(variables) > 6
    assert max(float(np.abs(a - b).max()) for a, b in zip(trainer.ema_values(), got)) == 0

    trainer.ema_statistics = "standing"
    with unittest.mock.patch.object(base, "STANDING_BATCHES", 1):
        z, labels = base.sample_noise(base.STANDING_SEED, 0, base.STANDING_BATCH, 62, 10)
        training_mode, _ = trainer.models.generator.stateless_call(
            trainer.ema_values(), trainer.ema_statistics_values(), [z, labels], training=True
        )
        np.testing.assert_allclose(trainer.generate(z, labels), training_mode, atol=1e-5)


@pytest.mark.slow
def test_the_step_without_xla_computes_what_the_compiled_step_does(set_policy):
    """--no-jit on JAX (compile_mode "off": the iteration run op by op) against the compiled step, from the
    same state and batch: the same metrics to float32 rounding (XLA fuses and reorders sums), and the same
    gradients, read as each optimizer's Adam first moments after the step ((1 - beta_1) times the gradient
    it applied), all of an optimizer's as one vector, within test_jax_step's float32 bound (1e-4)."""
    set_policy("float32")
    models = networks.build_models((28, 28, 1), 10, width=0.125)
    rng = np.random.default_rng(1)
    batch = (
        rng.integers(0, 256, (8, 28, 28, 1), dtype=np.uint8),
        rng.integers(0, 10, 8).astype(np.int32),
        rng.uniform(-1, 1, (8, 62)).astype(np.float32),
        rng.integers(0, 10, 8).astype(np.int32),
    )
    compiled = jax_step.JaxStep(models, 10, jit=True)
    start = compiled.state()
    eager = jax_step.JaxStep(models, 10, jit=False)
    assert (compiled.compile_mode, eager.compile_mode) == ("step", "off")
    eager.load_state(start)
    results = []
    for trainer in (compiled, eager):
        trainer.load_state(start)
        metrics = np.asarray(trainer.train_step(*batch).vector)
        results.append((metrics, trainer.state()))
    (m_compiled, s_compiled), (m_eager, s_eager) = results
    np.testing.assert_allclose(m_eager, m_compiled, rtol=1e-4, atol=1e-6)
    assert s_eager.keys() == s_compiled.keys()
    for name in ("d", "g", "q"):
        keys = [
            k
            for k in s_compiled
            if k.startswith(f"optimizers/{name}_optimizer_adam/") and k.endswith("_momentum")
        ]
        eager_moments, compiled_moments = (
            np.concatenate([np.asarray(s[k], np.float64).ravel() for k in keys])
            for s in (s_eager, s_compiled)
        )
        assert keys and np.linalg.norm(eager_moments - compiled_moments) <= 1e-4 * np.linalg.norm(
            compiled_moments
        ), name
