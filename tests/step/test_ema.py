"""G-EMA: the moving average of G's weights, its warm-up, what generate() samples from, and its checkpoints.

The TensorFlow step runs here; the JAX step in a child process (Keras takes one backend per process),
which checks the same recurrence and its state()/load_state() round trip and prints what it measured.
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
from acgan.step.tf_step import TensorFlowStep
from acgan.training.tf_runtime import TensorFlowCheckpoints

REPO = Path(__file__).resolve().parents[2]
DECAY = 0.9  # the ramp (1 + t) / (10 + t) stays below it for the first 80 steps: both parts are exercised


def _batch(n=16, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, 28, 28, 1), dtype=np.uint8)
    labels = rng.integers(0, 10, n).astype(np.int32)
    return (images, labels) + sample_noise(1, seed, n, 62, 10)


def _step(decay=DECAY, jit=False, policy="float32"):
    """Eager unless asked (jit=True): XLA's compile is most of a test's time, and the average is the same."""
    keras.utils.set_random_seed(3)
    preset = dataclasses.replace(presets.REFERENCE, ema_decay=decay)
    return TensorFlowStep(build_models((28, 28, 1), 10, width=0.125), 10, preset, jit=jit)


def _expected_average(trainer, steps):
    """Trains `steps` steps and follows the average on the host in float64: the ramped recurrence."""
    average = [v.numpy().astype(np.float64) for v in trainer.g_variables]
    for t in range(steps):
        trainer.train_step(*_batch(seed=t)).read()
        decay = min(DECAY, (1 + t) / (10 + t))
        average = [
            a * decay + v.numpy() * (1 - decay) for a, v in zip(average, trainer.g_variables)
        ]
    return average


def _max_difference(a, b):
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - y))) for x, y in zip(a, b))


@pytest.mark.slow
@pytest.mark.parametrize("policy,jit", [("float32", True), ("mixed_float16", False)])
def test_the_average_follows_the_ramped_recurrence_and_generate_samples_it(policy, jit, set_policy):
    set_policy(policy)
    trainer = _step(policy=policy, jit=jit)
    expected = _expected_average(trainer, 3)
    got = trainer.ema_values()
    assert {v.dtype for v in got} == {np.dtype("float32")}  # whatever the policy
    assert _max_difference(got, expected) < 1e-6
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
    set_policy("float32")
    straight = _step()
    _expected_average(straight, 4)
    first = _step()
    _expected_average(first, 2)
    TensorFlowCheckpoints(first, tmp_path, keep=1).save(2, [])
    resumed = _step()
    latest, _ = TensorFlowCheckpoints(resumed, tmp_path, keep=1).restore(tmp_path)
    assert latest and int(resumed.step.numpy()) == 2
    np.testing.assert_array_equal(
        np.concatenate([v.ravel() for v in resumed.ema_values()]),
        np.concatenate([v.ravel() for v in first.ema_values()]),
    )
    for t in (2, 3):
        resumed.train_step(*_batch(seed=t)).read()
    assert (
        _max_difference(resumed.ema_values(), [v.astype(np.float64) for v in straight.ema_values()])
        < 1e-6
    )


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


def test_the_setting_is_checked():
    with pytest.raises(UserError, match=r"--ema_decay must be in \[0, 1\)"):
        Config(ema_decay=1.0).validate()
    Config(ema_decay=0.0).validate()
    assert presets.ema_decay("reference", 0.5) == 0.5
    assert presets.ema_decay("reference") == presets.REFERENCE.ema_decay
