"""What the steps of every backend share, with no backend in it: no TensorFlow, no JAX, no Keras, so
the training health checks and the reports can use it without loading a framework.

The optimizers' and the models' names, the order of the step's metric vector and StepMetrics, its
host-side reader (numpy only: `np.asarray` copies a TensorFlow tensor or a JAX array alike), and the
learning-rate decay's factor. A preset's settings are in acgan.presets; the step's shared code in base.py.
"""

import numpy as np

OPTIMIZER_NAMES = ("d", "g", "q")
MODEL_NAMES = ("generator", "trunk", "d_head", "q_head")  # the order of networks.ACGANModels
LOSS_METRICS = ("d_loss", "g_loss", "q_loss", "q_accuracy_real", "q_accuracy_fake")
# The order of the step's metric vector.
METRIC_NAMES = LOSS_METRICS + tuple(
    f"{name}_{what}"
    for what in ("loss_scale", "skipped", "skipped_in_a_row")
    for name in OPTIMIZER_NAMES
)


def learning_rate_scale(progress, decay):
    """The factor on the learning rates at `progress` through a run (0 at its start, 1 at its end; None
    when the run has no set length) when they fall linearly to zero over its last `decay` (None: no
    decay). In steps of 1%, so the loop assigns new rates at most 100 times a run."""
    if not decay or progress is None:
        return 1.0
    left = max(0.0, 1.0 - progress)
    return min(100, round(100 * left / decay)) / 100


class StepMetrics:
    """One step's metrics: a float32 vector on the device, in METRIC_NAMES order.

    `metrics["d_loss"]` is a scalar tensor (no host copy yet); `read()` copies the whole vector to the
    host once and returns {name: float}. Counts are exact in float32 up to 2^24.
    """

    def __init__(self, vector):
        self.vector = vector

    def __getitem__(self, name):
        return self.vector[METRIC_NAMES.index(name)]

    def keys(self):
        return METRIC_NAMES

    def read(self):
        return dict(zip(METRIC_NAMES, (float(v) for v in np.asarray(self.vector))))
