"""The train step's contract, and what the step of every backend shares (tf_step.TensorFlowStep, jax_step.JaxStep).

    step = factory.build_step(preset, backend, models, num_classes, ...)
    step.train_step(images, labels, z, fake_labels) -> StepMetrics
        one iteration: the D update on the real and the fake batch, then G and Q from the same single G
        forward; the metrics are one vector in METRIC_NAMES order, left on the device until
        StepMetrics.read() copies it once
    step.generate(z, labels) -> images in [0, 1], inference mode
    step.preset (the acgan.presets.Preset it trains: its loss resolved), step.noise_dim, step.step (the
    step counter), step.compile_mode, step.compile_reason, step.learning_rates (D, G, Q), step.beta_1,
    step.g_learns_from_q, step.augment, step.loss
    step.skipped_steps(), step.loss_scales(), step.weights_fingerprint()
    step.set_learning_rate_scale(f): every optimizer's rate becomes its preset rate times f (the
        training loop's decay, common.learning_rate_scale); step.learning_rate_scale is the factor now
    step.sync_variables()   (JAX: the step's state written back into the Keras variables; TF: nothing)
    step.ema_decay (0: no average of G), step.samples_from_ema (whether generate() uses it),
    step.ema_values() (the average on the host), step.swap_in_ema() (G's weights become the average),
    step.ema_statistics (where the average's batch-norm statistics come from: presets.EMA_STATISTICS)

StepBase holds the shared part: the preset's settings, the three optimizers and the variable groups
they train, the host-side reads (skipped steps, loss scales, the weights fingerprint), and the
learning-rate scale (the bookkeeping after each iteration is algorithm.after_iteration's).
A backend's step adds its state, runs algorithm.iteration (the update itself) in its train_step, and
supplies the hooks named below (`_host_*`, `_set_learning_rates`).
"""

import abc
import hashlib

import numpy as np

from acgan.data.batches import sample_noise
from acgan.model import precision
from acgan.step import algorithm
from acgan.step.common import MODEL_NAMES, OPTIMIZER_NAMES


class StepBase(abc.ABC):
    """The preset's settings, the optimizers and their variable groups, and the host-side reads; the
    abstract methods are what each backend's step supplies (the contract the callers rely on)."""

    def _set_up(self, models, num_classes, preset):
        """The models and the settings of `preset` (an acgan.presets.Preset), before any optimizer."""
        self.models = models
        self.num_classes = num_classes
        self.noise_dim = models.generator.input[0].shape[-1]
        self.preset = preset
        # The dtype policy is the one the models were built under (the global one then): the step reads it
        # from them, so a run's policy has one source.
        policies = {model.dtype_policy.name for model in models}
        if len(policies) != 1:
            raise ValueError(
                f"the models were built under different dtype policies: {sorted(policies)}"
            )
        self.policy = policies.pop()
        self.learning_rates = tuple(preset.learning_rates)  # (D, G, Q)
        self.learning_rate_scale = (
            1.0  # the factor on them now (set_learning_rate_scale: the preset's decay)
        )
        # False: the fake batch's class loss moves nothing (it is only measured); the class reaches G
        # through D alone (acgan_cifar's projection D head).
        self.g_learns_from_q = bool(preset.g_learns_from_q)
        self.beta_1 = float(preset.beta_1)  # Adam's, for all three optimizers
        # The augmentation of every image D's trunk sees (acgan.step.augment's policy names), or None.
        self.augment = tuple(preset.augment) if preset.augment else None
        self.loss = preset.loss  # D's and G's real/fake loss (losses.py); Preset checked it
        # An exponential moving average of G's trainable weights (G-EMA), in float32, for sampling; 0: none.
        self.ema_decay = float(preset.ema_decay)
        # generate() draws from the average (grids, evaluations)
        self.samples_from_ema = self.ema_decay > 0
        self.generator_holds_ema = False  # swap_in_ema() made G's own weights the average
        # Where the average's batch-norm statistics come from (presets.EMA_STATISTICS). The step moves an
        # average of G's statistics (its non-trainable variables) beside the weights whatever the choice,
        # so a run's checkpoints can be sampled with any of them.
        self.ema_statistics = preset.ema_statistics
        self.g_statistics = list(models.generator.non_trainable_variables)
        self._standing = (None, None)  # (the step they were computed at, standing_statistics)

    def _make_optimizers(self):
        """Adam for D, G and Q at the preset's rates and beta_1 (loss-scaled under mixed_float16)."""
        d_rate, g_rate, q_rate = self.learning_rates
        self.d_optimizer = precision.make_optimizer(d_rate, self.beta_1, self.policy, "d_optimizer")
        self.g_optimizer = precision.make_optimizer(g_rate, self.beta_1, self.policy, "g_optimizer")
        self.q_optimizer = precision.make_optimizer(q_rate, self.beta_1, self.policy, "q_optimizer")

    def _build_optimizers(self):
        """The variables each optimizer trains, and the optimizers built for them."""
        # {optimizer name: the models (MODEL_NAMES) whose trainable weights it trains, in this order}. Q
        # trains the shared trunk, its head and (with g_learns_from_q) G: the mutual-information term.
        self.trained_models = {
            "d": algorithm.D_MODELS,
            "g": ("generator",),
            "q": algorithm.Q_MODELS + (("generator",) if self.g_learns_from_q else ()),
        }
        models = dict(zip(MODEL_NAMES, self.models))
        self.d_variables, self.g_variables, self.q_variables = (
            [v for model in self.trained_models[name] for v in models[model].trainable_variables]
            for name in OPTIMIZER_NAMES
        )
        for optimizer, variables in self._optimizers_and_variables():
            optimizer.build(variables)

    def _optimizers_and_variables(self):
        """((optimizer, the variables it trains), ...) for D, G and Q (OPTIMIZER_NAMES' order)."""
        return (
            (self.d_optimizer, self.d_variables),
            (self.g_optimizer, self.g_variables),
            (self.q_optimizer, self.q_variables),
        )

    def optimizer(self, name):
        """The optimizer called `name` ("d", "g" or "q")."""
        return getattr(self, f"{name}_optimizer")

    def set_learning_rate_scale(self, scale):
        """Sets each optimizer's learning rate to its preset rate times `scale`; the step reads the rates
        as values, so no retrace."""
        self._set_learning_rates([rate * scale for rate in self.learning_rates])
        self.learning_rate_scale = scale

    def skipped_steps(self):
        """{optimizer name: steps it skipped so far}."""
        step, iterations = self._host_step_and_iterations()
        return {name: step - int(i) for name, i in zip(OPTIMIZER_NAMES, iterations)}

    def loss_scales(self):
        """{optimizer name: current loss scale} (1.0 where there is no loss scaling)."""
        return dict(zip(OPTIMIZER_NAMES, (float(s) for s in self._host_loss_scales())))

    def weights_fingerprint(self):
        """sha256 of every model weight, BN statistics included: the models in ACGANModels' order, each
        one's `variables` in order, so the same weights give the same fingerprint on both backends (and on
        every replica and worker of a run, which hold equal weights)."""
        digest = hashlib.sha256()
        for name, model in zip(MODEL_NAMES, self.models):
            for value in self._host_model_values(name, model.variables):
                digest.update(np.ascontiguousarray(np.asarray(value)).tobytes())
        return digest.hexdigest()

    def ema_values(self):
        """The average of G's trainable weights as host arrays, in generator.trainable_variables' order; None
        when the step keeps none."""
        return None if not self.ema_decay else [np.asarray(v) for v in self._host_ema_values()]

    def ema_statistics_values(self):
        """The average of G's batch-norm statistics (G's non-trainable variables, in their order) on the
        host; None when the step keeps no average."""
        return None if not self.ema_decay else [np.asarray(v) for v in self._host_ema_statistics()]

    def sampling_statistics(self):
        """The batch-norm statistics the EMA generator samples with, per `ema_statistics`, as host arrays."""
        if self.ema_statistics == "averaged":
            return self.ema_statistics_values()
        if self.ema_statistics == "g":
            return [np.asarray(v) for v in self._host_model_values("generator", self.g_statistics)]
        step = self._host_step_and_iterations()[0]
        if self._standing[0] != step:  # the average moved since they were computed
            self._standing = (step, self.standing_statistics(self.ema_values()))
        return self._standing[1]

    def standing_statistics(self, weights):
        """BigGAN's standing statistics: each batch-norm layer's mean and (biased) variance over
        STANDING_BATCHES batches of G's own noise and labels, G run with `weights` in training mode (each
        layer's input normalised with its batch's moments, as in training), averaged over the batches.
        Fixed noise and labels, so the same weights give the same statistics."""
        generator = self.models.generator
        # G's stateless call in training mode returns each statistic moved from 0 by one batch: momentum x 0
        # + (1 - momentum) x the batch's moment.
        share = [1.0 - _momentum_of(generator, v) for v in self.g_statistics]
        zeros = [np.zeros(v.shape, np.float32) for v in self.g_statistics]
        total = [np.zeros(v.shape, np.float64) for v in self.g_statistics]
        for batch in range(STANDING_BATCHES):
            z, labels = sample_noise(
                STANDING_SEED, batch, STANDING_BATCH, self.noise_dim, self.num_classes
            )
            _, moved = generator.stateless_call(weights, zeros, [z, labels], training=True)
            total = [t + np.asarray(m, np.float64) / s for t, m, s in zip(total, moved, share)]
        return [(t / STANDING_BATCHES).astype(np.float32) for t in total]

    def swap_in_ema(self):
        """G's trainable weights become their average and its batch-norm statistics the average's
        (sampling_statistics), for a step loaded to sample or export, never to train on: `models.generator`
        and generate() then give the EMA generator. Returns whether there was one."""
        if not self.ema_decay:
            return False
        statistics = self.sampling_statistics()
        for variable, value in zip(
            self.g_variables + self.g_statistics, self.ema_values() + statistics
        ):
            variable.assign(value)
        self._generator_assigned()
        self.samples_from_ema = False  # the generator's own weights are the average now
        self.generator_holds_ema = True
        return True

    # What XLA made of the step, for the profile's and the FLOP count's readers: None where the backend
    # has no whole-step program to show (TensorFlow's; JAX's uncompiled step).

    def lowered_step(self, images, labels, z, fake_labels):
        """The compiled step lowered for these inputs (jax.stages.Lowered), or None."""
        return None

    def compiled_hlo(self):
        """XLA's optimized HLO text of the step as it last ran, or None."""
        return None

    # The backend's step.

    @abc.abstractmethod
    def train_step(self, images, labels, z, fake_labels):
        """One step on a global batch; returns its StepMetrics without waiting for the device."""

    @abc.abstractmethod
    def generate(self, z, labels):
        """Images [B, H, W, C] float32 in [0, 1], inference mode; from G's average when samples_from_ema."""

    @abc.abstractmethod
    def retrace(self):
        """(Re)builds the step functions; call it after patching anything the step calls."""

    @abc.abstractmethod
    def sync_variables(self):
        """The step's state written into the Keras variables (where it lives elsewhere)."""

    # The backend's hooks.

    @abc.abstractmethod
    def _host_ema_values(self):
        """The average of G's trainable weights, as numbers or host-readable arrays."""

    @abc.abstractmethod
    def _host_ema_statistics(self):
        """The average of G's batch-norm statistics, as numbers or host-readable arrays."""

    @abc.abstractmethod
    def _generator_assigned(self):
        """G's Keras variables were assigned (swap_in_ema): the step's state takes G's from them."""

    @abc.abstractmethod
    def _set_learning_rates(self, rates):
        """Sets the (D, G, Q) optimizers' learning rates to `rates`."""

    @abc.abstractmethod
    def _host_step_and_iterations(self):
        """(the step counter, [each optimizer's iterations]) on the host."""

    @abc.abstractmethod
    def _host_loss_scales(self):
        """Each optimizer's loss scale (1.0 without loss scaling), as numbers or host-readable scalars."""

    @abc.abstractmethod
    def _host_model_values(self, name, variables):
        """The values of `variables` (of the model called `name`), in that order, as host arrays."""


# Standing statistics (standing_statistics): BigGAN's 16 accumulations, of 128 samples each, from noise of
# their own seed.
STANDING_BATCHES = 16
STANDING_BATCH = 128
STANDING_SEED = 7919


def _momentum_of(model, variable):
    """The momentum of the batch-norm layer whose moving statistic `variable` is (G's batch norms are
    among its own layers, as distribute.synchronize_batch_norm walks them)."""
    for layer in model.layers:
        if variable is getattr(layer, "moving_mean", None) or variable is getattr(
            layer, "moving_variance", None
        ):
            return layer.momentum
    raise ValueError(f"{variable.path} is not a batch-norm layer's moving statistic")
