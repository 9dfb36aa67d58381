"""G-EMA: the moving average of G's weights and batch-norm statistics, its warm-up, what generate() samples
from (with each choice of statistics), and its checkpoints.

The TensorFlow step runs here (the JAX step's average: tests/jax/test_jax_model.py). Sizes: the reference
model at width 0.125, batch 16, two to four eager steps (XLA only in the one case that tests the average
inside the compiled step): the ramp is below DECAY for 80 steps, so every step exercises it, and the
resume is checked against one straight step checkpointed on the way rather than a second straight run.
"""

import dataclasses
from pathlib import Path

import keras
import numpy as np
import pytest

from acgan import presets
from acgan.config import Config
from acgan.data.batches import sample_noise
from acgan.errors import UserError
from acgan.model.networks import build_models
from acgan.step import base
from acgan.step.tf_step import TensorFlowStep
from acgan.training.tf_runtime import TensorFlowCheckpoints

REPO = Path(__file__).resolve().parents[2]
DECAY = 0.9  # the ramp (1 + t) / (10 + t) stays below it for the first 80 steps: both parts are exercised


def _batch(n=16, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, 28, 28, 1), dtype=np.uint8)
    labels = rng.integers(0, 10, n).astype(np.int32)
    return (images, labels) + sample_noise(1, seed, n, 62, 10)


def _step(decay=DECAY, jit=False, policy="float32", statistics="g"):
    """Eager unless asked (jit=True): XLA's compile is most of a test's time, and the average is the same."""
    keras.utils.set_random_seed(3)
    preset = dataclasses.replace(presets.REFERENCE, ema_decay=decay, ema_statistics=statistics)
    return TensorFlowStep(build_models((28, 28, 1), 10, width=0.125), 10, preset, jit=jit)


def _expected_average(trainer, steps):
    """Trains `steps` steps and follows the average of G's weights and of its batch-norm statistics on the
    host in float64: the ramped recurrence. Returns (weights, statistics)."""
    variables = trainer.g_variables + trainer.g_statistics
    average = [v.numpy().astype(np.float64) for v in variables]
    for t in range(steps):
        trainer.train_step(*_batch(seed=t)).read()
        decay = min(DECAY, (1 + t) / (10 + t))
        average = [a * decay + v.numpy() * (1 - decay) for a, v in zip(average, variables)]
    n = len(trainer.g_variables)
    return average[:n], average[n:]


def _max_difference(a, b):
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - y))) for x, y in zip(a, b))


@pytest.mark.slow
@pytest.mark.parametrize("policy,jit", [("float32", True), ("mixed_float16", False)])
def test_the_average_follows_the_ramped_recurrence_and_generate_samples_it(policy, jit, set_policy):
    set_policy(policy)
    trainer = _step(policy=policy, jit=jit)
    expected, statistics = _expected_average(trainer, 3)
    got = trainer.ema_values()
    assert {v.dtype for v in got} == {np.dtype("float32")}  # whatever the policy
    assert _max_difference(got, expected) < 1e-6
    assert len(statistics) == 6  # the reference G's three batch norms' moving mean and variance
    assert _max_difference(trainer.ema_statistics_values(), statistics) < 1e-6
    # It is not G itself: the ramp's 0.1 and 0.18 left a part of the earlier weights in it.
    assert _max_difference(got, [v.numpy() for v in trainer.g_variables]) > 1e-5
    _, _, z, labels = _batch()
    from_average = np.asarray(trainer.generate(z, labels), np.float32)
    trainer.samples_from_ema = False
    assert np.max(np.abs(from_average - np.asarray(trainer.generate(z, labels), np.float32))) > 1e-5
    # G's own weights become the average
    assert trainer.swap_in_ema() and trainer.generator_holds_ema
    assert _max_difference([v.numpy() for v in trainer.g_variables], trainer.ema_values()) == 0
    np.testing.assert_allclose(
        np.asarray(trainer.generate(z, labels), np.float32), from_average, atol=2e-3
    )


@pytest.mark.slow
def test_a_resumed_run_continues_the_average_exactly(tmp_path, set_policy):
    """One step trains 4 steps straight, checkpointed after its second; a second step restored from that
    checkpoint and trained steps 2 and 3 ends with the same average (one straight run, not a straight
    run and a first half apart: the first half's steps are the straight run's, seeds and all)."""
    set_policy("float32")
    ema_of = {
        "weights": base.StepBase.ema_values,
        "statistics": base.StepBase.ema_statistics_values,
    }
    straight = _step()
    _expected_average(straight, 2)
    TensorFlowCheckpoints(straight, tmp_path, keep=1).save(2, [])
    at_2 = {name: [v.copy() for v in part(straight)] for name, part in ema_of.items()}
    for t in (2, 3):
        straight.train_step(*_batch(seed=t)).read()
    resumed = _step()
    latest, _ = TensorFlowCheckpoints(resumed, tmp_path, keep=1).restore(tmp_path)
    assert latest and int(resumed.step.numpy()) == 2
    for name, part in ema_of.items():
        np.testing.assert_array_equal(
            np.concatenate([v.ravel() for v in part(resumed)]),
            np.concatenate([v.ravel() for v in at_2[name]]),
        )
    for t in (2, 3):
        resumed.train_step(*_batch(seed=t)).read()
    for part in ema_of.values():
        assert _max_difference(part(resumed), [v.astype(np.float64) for v in part(straight)]) < 1e-6


@pytest.mark.slow
def test_decay_0_keeps_none_and_a_checkpoint_without_one_does_not_fit_a_step_with_one(
    tmp_path, set_policy
):
    set_policy("float32")
    old = _step(decay=0.0)  # --ema_decay 0: no average
    old.train_step(*_batch()).read()
    assert old.ema_values() is None and not old.samples_from_ema and not old.swap_in_ema()
    TensorFlowCheckpoints(old, tmp_path, keep=1).save(1, [])
    with pytest.raises(UserError, match="none fits the model this code builds"):
        TensorFlowCheckpoints(_step(), tmp_path, keep=1).restore(tmp_path)
    latest, _ = TensorFlowCheckpoints(_step(decay=0.0), tmp_path, keep=1).restore(tmp_path)
    assert latest


@pytest.mark.slow
def test_each_choice_of_statistics_is_what_the_average_samples_with(set_policy, monkeypatch):
    """g: G's own moving statistics; averaged: their average; standing: recomputed for the average's weights.
    Standing statistics over one batch make inference on that batch equal to the training-mode pass (each
    batch norm then normalises with that batch's moments either way); over STANDING_BATCHES, the first batch
    norm's are the mean of its input's moments per batch (no batch norm comes before it)."""
    set_policy("float32")
    trainer = _step(statistics="standing")
    _expected_average(trainer, 3)
    generator, weights = trainer.models.generator, trainer.ema_values()
    own = [v.numpy() for v in trainer.g_statistics]
    inputs = [
        base.sample_noise(base.STANDING_SEED, b, base.STANDING_BATCH, trainer.noise_dim, 10)
        for b in range(base.STANDING_BATCHES)
    ]
    standing = trainer.sampling_statistics()

    z, labels = inputs[0]
    monkeypatch.setattr(base, "STANDING_BATCHES", 1)
    trainer._standing = (None, None)  # computed again over one batch
    training_mode, _ = generator.stateless_call(weights, own, [z, labels], training=True)
    np.testing.assert_allclose(trainer.generate(z, labels), training_mode, atol=1e-5)
    trainer.ema_statistics = "g"
    assert _max_difference(trainer.sampling_statistics(), own) == 0
    from_g = np.asarray(trainer.generate(z, labels))
    trainer.ema_statistics = "averaged"
    assert _max_difference(trainer.sampling_statistics(), trainer.ema_statistics_values()) == 0
    assert np.max(np.abs(from_g - np.asarray(trainer.generate(z, labels)))) > 1e-6
    # swapped in, G's own statistics become the chosen ones
    assert trainer.swap_in_ema()
    assert (
        _max_difference([v.numpy() for v in trainer.g_statistics], trainer.ema_statistics_values())
        == 0
    )
    first_input = keras.Model(
        generator.inputs, generator.get_layer("g_bn1").input
    )  # G: the average now
    moments = [first_input(list(batch)).numpy().reshape(-1, own[0].shape[0]) for batch in inputs]
    np.testing.assert_allclose(standing[0], np.mean([m.mean(0) for m in moments], 0), atol=1e-6)
    np.testing.assert_allclose(standing[1], np.mean([m.var(0) for m in moments], 0), rtol=1e-5)


def test_the_setting_is_checked():
    with pytest.raises(UserError, match=r"--ema_decay must be in \[0, 1\)"):
        Config(ema_decay=1.0).validate()
    with pytest.raises(
        UserError, match=r"--ema_statistics 'moving': choose one of g, averaged, standing"
    ):
        Config(ema_statistics="moving").validate()
    Config(ema_decay=0.0).validate()
    assert presets.resolve(Config(ema_decay=0.5), (28, 28, 1)).ema_decay == 0.5
    assert presets.resolve(Config(), (28, 28, 1)).ema_decay == presets.REFERENCE.ema_decay
