"""--epochs E is E passes over the data: ceil(E * n / batch) steps (batches straddle epochs)."""
import pytest

from acgan.config import Config
from acgan.training.loop import DEFAULT_STEPS, total_steps


@pytest.mark.parametrize("epochs, n, batch, steps", [
    (1, 20_000, 64, 313),    # 312.5 batches: the last one straddles into the next epoch
    (3, 100, 64, 5),         # 300 images: 4.7 batches (the old floor gave 3, fewer than 2 passes)
    (2, 128, 64, 4),         # exact
    (1, 10, 64, 1),
])
def test_epochs_cover_every_image(epochs, n, batch, steps):
    assert total_steps(Config(epochs=epochs, batch=batch), n) == steps
    assert (steps - 1) * batch < epochs * n <= steps * batch


def test_other_lengths():
    assert total_steps(Config(steps=7), 100) == 7
    assert total_steps(Config(), 100) == DEFAULT_STEPS
    assert total_steps(Config(minutes=1.0), 100) is None
