"""--epochs E is E passes over the data: ceil(E * n / batch) steps (batches straddle epochs)."""

import pytest

from acgan.config import Config
from acgan.presets import ACGAN_CIFAR, REFERENCE
from acgan.step.common import learning_rate_scale
from acgan.training.setup import DEFAULT_STEPS, total_steps


@pytest.mark.parametrize(
    "epochs, n, batch, steps",
    [
        (1, 20_000, 64, 313),  # 312.5 batches: the last one straddles into the next epoch
        (3, 100, 64, 5),  # 300 images: 4.7 batches (the old floor gave 3, fewer than 2 passes)
        (2, 128, 64, 4),  # exact
        (1, 10, 64, 1),
    ],
)
def test_epochs_cover_every_image(epochs, n, batch, steps):
    assert total_steps(Config(epochs=epochs, batch=batch), n) == steps
    assert (steps - 1) * batch < epochs * n <= steps * batch


def test_other_lengths():
    assert total_steps(Config(steps=7), 100) == 7
    assert total_steps(Config(), 100) == DEFAULT_STEPS
    assert total_steps(Config(minutes=1.0), 100) is None


def test_learning_rates_fall_linearly_to_zero_over_the_last_fraction_of_a_run():
    """Over the last half: full rates until halfway, then linearly to zero at the end, in 1% steps; no
    set length (None) or no decay (the reference model's None) keeps them. acgan_cifar's: the last quarter."""
    assert REFERENCE.learning_rate_decay is None and ACGAN_CIFAR.learning_rate_decay == 0.25
    scales = [learning_rate_scale(p / 100, 0.5) for p in range(0, 101)]
    assert scales[:51] == [1.0] * 51
    assert scales[75] == 0.5 and scales[90] == 0.2 and scales[100] == 0.0
    assert all(a >= b for a, b in zip(scales, scales[1:])) and len(set(scales)) == 51
    assert learning_rate_scale(0.8, 0.25) == 0.8 and learning_rate_scale(0.75, 0.25) == 1.0
    assert learning_rate_scale(1.3, 0.25) == 0.0  # past a deadline
    assert learning_rate_scale(0.9, None) == 1.0 and learning_rate_scale(None, 0.25) == 1.0
    assert learning_rate_scale(0.9975, 0.25) == 0.01  # 1% steps: at most 100 assignments a run
