"""The model presets (`--arch`): each one a frozen record of its networks and its training settings.

No framework is imported here, so the configuration, the reports and the health checks can read a
preset without loading TensorFlow, JAX or Keras. The networks are built from a preset by
acgan.model.networks.build_models, the step by acgan.step.factory.build_step. A preset of your own is
one more instance in PRESETS (docs/presets.md#your-own-preset).
"""

import dataclasses
from typing import ClassVar, Optional, Union

from acgan.errors import UserError

# D's and G's real/fake loss (acgan.step.losses); a run's "auto" is its preset's `loss`.
ADVERSARIAL_LOSSES = ("nonsaturating", "hinge")


def check_adversarial_loss(loss):
    """ValueError unless `loss` names one of ADVERSARIAL_LOSSES (a step takes a resolved name, not "auto")."""
    if loss not in ADVERSARIAL_LOSSES:
        raise ValueError(
            f"unknown adversarial loss {loss!r}: one of {', '.join(ADVERSARIAL_LOSSES)}"
        )


# Where the EMA generator's batch-norm statistics come from (docs/training.md#g-ema): "g", G's own moving
# statistics (which belong to G's weights, not the average's); "averaged", moved with the weights at the same
# decay (StudioGAN's default EMA); "standing", recomputed for the average's weights before it samples, over
# G's own noise and labels in training mode (BigGAN's standing statistics).
# {choice: how a report names it}.
EMA_STATISTICS = {
    "g": "with G's own batch-norm statistics",
    "averaged": "with averaged batch-norm statistics",
    "standing": "with standing batch-norm statistics",
}


def check_ema_statistics(choice):
    """UserError unless `choice` names one of EMA_STATISTICS."""
    if choice not in EMA_STATISTICS:
        raise UserError(f"--ema_statistics {choice!r}: choose one of {', '.join(EMA_STATISTICS)}")


def check_ema_decay(decay):
    """UserError unless `decay` is a G-EMA decay: a number in [0, 1) (0: no average)."""
    if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0 <= decay < 1:
        raise UserError(f"--ema_decay must be in [0, 1) (0: no average of G), got {decay!r}")


@dataclasses.dataclass(frozen=True)
class ReferenceNetworks:
    """The original experiment's networks (acgan/model/networks.py, docs/presets.md#the-reference-model)."""

    architecture: ClassVar[str] = "reference"
    side_divisor: ClassVar[int] = 4  # two stride-2 layers each way
    noise_dim: int = 62  # G's noise vector, uniform in [-1, 1]


@dataclasses.dataclass(frozen=True)
class PaperCifarNetworks:
    """The AC-GAN paper's CIFAR-10 networks and the switches between the paper's table and the departures
    from it (acgan/model/paper_cifar.py, docs/presets.md#departures-from-the-table)."""

    architecture: ClassVar[str] = "paper_cifar"
    side_divisor: ClassVar[int] = 8  # three stride-2 layers each way
    noise_dim: int = 100  # G's noise vector, uniform in [-1, 1]
    # G's dense layer's maps (x side/8 x side/8), then its two upsampling layers'
    g_maps: tuple = (
        384,
        192,
        96,
    )
    g_kernel: int = 3  # G's convolution kernels; the table's: 5 (docs/presets.md#generator-kernels)
    # How G doubles its side: "resize" (2x nearest-neighbour + a convolution) or "transpose" (the table's
    # stride-2 transposed convolutions; docs/presets.md#upsampling).
    upsample: str = "resize"
    # The D trunk's convolutions' maps, strides 2, 1, 2, ...; the table's: 16, 32, 64, 128, 256, 512
    # (docs/presets.md#discriminator-maps).
    d_maps: tuple = (64, 64, 128, 128, 256, 256)
    d_kernel: int = 3  # the D trunk's convolution kernels
    dropout: float = (
        0.0  # after each of D's convolutions; 0: none; the table's: 0.5 (docs/presets.md#dropout)
    )
    # D's convolutions spectrally normalised, no batch norm in D; False: the table's batch norm
    # (docs/presets.md#spectral-norm).
    spectral_norm: bool = True
    # A channel of the batch's spread after D's last convolution (docs/presets.md#minibatch-standard-deviation).
    minibatch_stddev: bool = True
    # D's real/fake logit has a class term <embed(label), features> (docs/presets.md#projection-discriminator).
    projection: bool = True


@dataclasses.dataclass(frozen=True)
class Preset:
    """One model preset: which networks, their sizes and choices, and how the step trains them."""

    name: str  # what --arch and a run's config.json call it
    # the builder (its `architecture`) and its knobs
    networks: Union[ReferenceNetworks, PaperCifarNetworks]
    # Adam's learning rates for the D, G and Q optimizers (docs/presets.md#learning-rates).
    learning_rates: tuple
    beta_1: float  # Adam's beta_1 (momentum) for all three optimizers (docs/presets.md#adam-beta1)
    # The last fraction of a run over which the learning rates fall linearly to zero, or None: constant
    # rates (acgan.step.common.learning_rate_scale; docs/presets.md#learning-rate-decay).
    learning_rate_decay: Optional[float]
    # The differentiable augmentation of every image D's trunk sees, as acgan.step.augment's policy names,
    # or None (docs/presets.md#augmentation).
    augment: Optional[tuple]
    # D's and G's real/fake loss, one of ADVERSARIAL_LOSSES; --loss overrides it
    # (docs/presets.md#adversarial-loss).
    loss: str
    # Whether Q's classifier (the trunk and Q head) also learns to name G's labels on fake images; False:
    # from real images only (docs/presets.md#q-learns-from-real-images).
    q_learns_from_fakes: bool
    # Whether the fake images' class loss moves G (through Q's optimizer: the AC-GAN paper's class term for
    # G); False: the class reaches G through D alone (docs/presets.md#g-learns-classes-from-d).
    g_learns_from_q: bool
    # The decay of the exponential moving average of G's weights that grids, generate, evaluate and export
    # sample from (G-EMA); 0: none, sample G itself. --ema_decay overrides it (docs/training.md#g-ema).
    ema_decay: float = 0.0
    # Where the average's batch-norm statistics come from (EMA_STATISTICS); --ema_statistics overrides it.
    ema_statistics: str = "g"

    def __post_init__(self):
        check_adversarial_loss(self.loss)
        check_ema_decay(self.ema_decay)
        check_ema_statistics(self.ema_statistics)
        if len(self.learning_rates) != 3:
            raise ValueError(
                f"preset {self.name!r}: learning_rates are (D, G, Q), got {self.learning_rates!r}"
            )

    def with_loss(self, loss):
        """This preset training with real/fake loss `loss` (--loss); "auto": its own."""
        return self if loss == "auto" else dataclasses.replace(self, loss=loss)


REFERENCE = Preset(
    name="reference",
    networks=ReferenceNetworks(),
    learning_rates=(2e-4, 1e-3, 1e-3),
    beta_1=0.5,
    learning_rate_decay=None,
    augment=None,
    loss="nonsaturating",
    q_learns_from_fakes=True,
    g_learns_from_q=True,
)

ACGAN_CIFAR = Preset(
    name="acgan_cifar",
    networks=PaperCifarNetworks(),
    learning_rates=(2e-4, 2e-4, 2e-4),
    beta_1=0.0,  # as spectral-norm GANs do (Miyato et al. 2018)
    learning_rate_decay=0.25,  # CycleGAN's schedule (Zhu et al. 2017)
    augment=("color", "translation", "cutout"),  # DiffAugment's policy (Zhao et al. 2020)
    loss="nonsaturating",
    q_learns_from_fakes=False,
    g_learns_from_q=False,
    # sampled from an average of G's weights with standing batch-norm statistics (docs/training.md#g-ema)
    ema_decay=0.999,
    ema_statistics="standing",
)

# Every preset by name: the --arch values (besides auto), in the order the help text lists them.
PRESETS = {preset.name: preset for preset in (REFERENCE, ACGAN_CIFAR)}


def validate_name(name):
    """UserError unless `name` is "auto" or a preset's name (what --arch takes)."""
    if name not in ("auto", *PRESETS):
        raise UserError(f"unknown arch {name!r}: choose auto, {', '.join(PRESETS)}")


def auto_name(arch, image_shape):
    """The preset `arch` names for images of `image_shape`: "auto" is acgan_cifar for 32x32x3 images and
    reference otherwise."""
    if arch != "auto":
        return arch
    return "acgan_cifar" if tuple(image_shape) == (32, 32, 3) else "reference"


def named(arch, image_shape):
    """The Preset `arch` ("auto" or a name) names for images of `image_shape`. UserError for an unknown
    name or a shape it cannot build."""
    validate_name(arch)
    preset = PRESETS[auto_name(arch, image_shape)]
    check_image_shape(image_shape, preset)
    return preset


def resolve(config, image_shape):
    """The Preset a run of `config` trains on images of `image_shape`: its --arch ("auto" from the
    shape), --loss, --ema_decay and --ema_statistics applied. A process resolves it once; every reader of the run after
    that reads the resolved names its config.json keeps. UserError as `named`."""
    preset = named(config.arch, image_shape).with_loss(config.loss)
    if config.ema_decay is not None:  # None: the preset's own
        preset = dataclasses.replace(preset, ema_decay=float(config.ema_decay))
    if config.ema_statistics is not None:
        preset = dataclasses.replace(preset, ema_statistics=config.ema_statistics)
    return preset


def check_image_shape(image_shape, preset):
    """UserError unless `preset` builds images of `image_shape`."""
    height, width, depth = image_shape
    if height != width or height % 4 or height < 8 or depth not in (1, 3):
        raise UserError(
            f"image size {height}x{width}x{depth} is not supported: the models need square images "
            "whose side divides by 4 (e.g. 28x28 or 32x32) with 1 or 3 channels"
        )
    divisor = preset.networks.side_divisor
    if height % divisor:
        raise UserError(
            f"--arch {preset.name} needs a side that divides by {divisor} (e.g. 32x32), "
            f"not {height}x{width}; use --arch reference"
        )


def adversarial_loss(arch="reference", loss="auto"):
    """The real/fake loss a run of preset `arch` trains with: `loss`, or with "auto" the preset's."""
    return PRESETS[arch].with_loss(loss).loss
