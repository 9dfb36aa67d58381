"""What the steps of every backend share, with no backend in it: no TensorFlow, no JAX, no Keras, so
the training health checks and the reports can use it without loading a framework.

The optimizers' names and learning rates (per model preset), the order of the step's metric vector,
StepOptions (the preset's settings every backend's step holds) and StepMetrics, the vector's host-side
reader (numpy only: `np.asarray` copies a TensorFlow tensor or a JAX array alike).
"""
import numpy as np

from acgan.config import ADVERSARIAL_LOSSES

# Adam's learning rates for the D, G and Q optimizers, per model preset: the reference model keeps the
# original experiment's; acgan_cifar the paper's 2e-4 for all three (docs/presets.md#learning-rates).
LEARNING_RATES = {"reference": (2e-4, 1e-3, 1e-3), "acgan_cifar": (2e-4, 2e-4, 2e-4)}
# Whether Q's classifier (the trunk and Q head) also learns to name G's labels on fake images, as in the
# AC-GAN paper, or from real images only, so G and Q cannot agree on a class code the real images do not
# have (docs/presets.md#q-learns-from-real-images).
Q_LEARNS_FROM_FAKES = {"reference": True, "acgan_cifar": False}
# Whether the fake images' class loss moves G (through Q's optimizer: the AC-GAN paper's class term for
# G), or the class reaches G only through D's projection, since the AC term pulls G towards what Q names
# most easily (docs/presets.md#g-learns-classes-from-d).
G_LEARNS_FROM_Q = {"reference": True, "acgan_cifar": False}
# Adam's beta_1 (momentum) for all three optimizers, per preset: the reference model keeps 0.5;
# acgan_cifar, whose D is spectrally normalised, uses 0 as spectral-norm GANs do (Miyato et al. 2018;
# docs/presets.md#adam-beta1).
ADAM_BETA_1 = {"reference": 0.5, "acgan_cifar": 0.0}
BETA_1 = ADAM_BETA_1["reference"]
# The last fraction of a run over which the learning rates fall linearly to zero, or None: constant
# rates. CycleGAN's schedule (Zhu et al. 2017); the run's progress is its steps out of --steps/--epochs
# or its time out of --minutes. For acgan_cifar it keeps the step a run happens to stop at from deciding
# its numbers (docs/presets.md#learning-rate-decay); the reference model keeps constant rates.
LEARNING_RATE_DECAY = {"reference": None, "acgan_cifar": 0.25}
# The differentiable augmentation of every image D sees (acgan.step.augment, DiffAugment's policy), per
# preset, or None: acgan_cifar's D and Q see augmented real and fake images
# (docs/presets.md#augmentation); the reference model none.
DIFF_AUGMENT = {"reference": None, "acgan_cifar": ("color", "translation", "cutout")}
# D's and G's real/fake loss per preset (acgan.step.losses; --loss overrides it): both presets keep the
# AC-GAN paper's nonsaturating loss (docs/presets.md#adversarial-loss).
ADVERSARIAL_LOSS = {"reference": "nonsaturating", "acgan_cifar": "nonsaturating"}
OPTIMIZER_NAMES = ("d", "g", "q")
LOSS_METRICS = ("d_loss", "g_loss", "q_loss", "q_accuracy_real", "q_accuracy_fake")
# The order of the step's metric vector.
METRIC_NAMES = LOSS_METRICS + tuple(
    f"{name}_{what}" for what in ("loss_scale", "skipped", "skipped_in_a_row") for name in OPTIMIZER_NAMES)


def learning_rates(arch="reference"):
    """(D, G, Q) learning rates for a model preset (a resolved name: reference or acgan_cifar)."""
    return LEARNING_RATES[arch]


def adam_beta_1(arch="reference"):
    """Adam's beta_1 for a preset's D, G and Q optimizers (ADAM_BETA_1)."""
    return ADAM_BETA_1[arch]


def q_learns_from_fakes(arch="reference"):
    """Whether the preset's Q classifier trains on fake images too (Q_LEARNS_FROM_FAKES)."""
    return Q_LEARNS_FROM_FAKES[arch]


def g_learns_from_q(arch="reference"):
    """Whether the preset's G learns from Q's class loss on its images (G_LEARNS_FROM_Q)."""
    return G_LEARNS_FROM_Q[arch]


def learning_rate_decay(arch="reference"):
    """The last fraction of a run over which the preset's learning rates fall to zero, or None
    (LEARNING_RATE_DECAY)."""
    return LEARNING_RATE_DECAY[arch]


def diff_augment(arch="reference"):
    """The preset's augmentation policy for D's inputs (a tuple of acgan.step.augment's names), or None
    (DIFF_AUGMENT)."""
    return DIFF_AUGMENT[arch]


def adversarial_loss(arch="reference", loss="auto"):
    """The real/fake loss a run of preset `arch` trains with: `loss`, or with "auto" the preset's
    (ADVERSARIAL_LOSS)."""
    return ADVERSARIAL_LOSS[arch] if loss == "auto" else check_adversarial_loss(loss)


def check_adversarial_loss(loss):
    """`loss` if it names one of ADVERSARIAL_LOSSES (a step takes a resolved name, not "auto")."""
    if loss not in ADVERSARIAL_LOSSES:
        raise ValueError(f"unknown adversarial loss {loss!r}: one of {', '.join(ADVERSARIAL_LOSSES)}")
    return loss


def learning_rate_scale(progress, decay):
    """The factor on the learning rates at `progress` through a run (0 at its start, 1 at its end; None
    when the run has no set length) when they fall linearly to zero over its last `decay` (None: no
    decay). In steps of 1%, so the loop assigns new rates at most 100 times a run."""
    if not decay or progress is None:
        return 1.0
    left = max(0.0, 1.0 - progress)
    return min(100, round(100 * left / decay)) / 100


def step_options(arch="reference", loss="auto"):
    """A preset's keyword arguments for the train step (tf_step.ACGAN, jax_step.JaxACGAN): its learning
    rates, what Q and G learn from, Adam's beta_1, the augmentation of D's inputs, and its real/fake loss
    (`loss`, or with "auto" the preset's). Every place that builds a step for a preset's weights (training,
    sampling from a checkpoint, the benchmark) builds the same step."""
    return {"learning_rates": learning_rates(arch), "q_learns_from_fakes": q_learns_from_fakes(arch),
            "g_learns_from_q": g_learns_from_q(arch), "beta_1": adam_beta_1(arch), "augment": diff_augment(arch),
            "loss": adversarial_loss(arch, loss)}


class StepOptions:
    """The preset's settings that the step of every backend holds (tf_step.ACGAN and jax_step.JaxACGAN
    take them as keyword arguments; step_options gives a preset's), set in one place."""

    def set_options(self, learning_rates=None, q_learns_from_fakes=True, g_learns_from_q=True, beta_1=BETA_1,
                    augment=None, loss="nonsaturating"):
        # (D, G, Q); None: the reference model's (learning_rates(arch) gives a preset's).
        self.learning_rates = tuple(learning_rates or LEARNING_RATES["reference"])
        self.learning_rate_scale = 1.0  # the factor on them now (set_learning_rate_scale: the preset's decay)
        # False: the fake batch's class loss moves G only; the trunk and Q head learn from real images.
        self.q_learns_from_fakes = bool(q_learns_from_fakes)
        # False: the fake batch's class loss moves nothing (it is only measured); the class reaches G
        # through D alone (acgan_cifar's projection D head).
        self.g_learns_from_q = bool(g_learns_from_q)
        self.beta_1 = float(beta_1)  # Adam's, for all three optimizers (adam_beta_1(arch) gives a preset's)
        # The augmentation of every image D's trunk sees (acgan.step.augment's policy names), or None.
        self.augment = tuple(augment) if augment else None
        self.loss = check_adversarial_loss(loss)  # D's and G's real/fake loss (losses.d_adversarial)


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
