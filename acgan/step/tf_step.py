"""The AC-GAN train step: a D update, then G and Q updates, each by its own (loss-scaled) optimizer.

The step runs on a tf.distribute strategy (one device by default); G's noise comes with each batch.
G runs once per iteration: D trains on its output with the gradient stopped, and G's and Q's
gradients reach G's weights through the same forward pass (cotangents with respect to the fake images).
It returns its metrics as one float32 vector (StepMetrics), so the host reads them with one copy.
"""
import hashlib

import keras
import numpy as np
import tensorflow as tf

from acgan.model import precision
from acgan.model.networks import d_head_inputs
from acgan.step import augment as augment_lib
from acgan.step import common, distribute, losses
# The backend-neutral names live in common.py; re-exported so `from acgan.step.tf_step import ...` keeps working.
from acgan.step.common import BETA_1, LOSS_METRICS, METRIC_NAMES, OPTIMIZER_NAMES, StepMetrics  # noqa: F401


class _Untracked:
    """Holds state that the checkpoint must not contain (tf.Module tracks only trackable attributes)."""


def _accuracy(labels, logits):
    predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
    return tf.reduce_mean(tf.cast(tf.equal(predicted, labels), tf.float32))


class ACGAN(tf.Module, common.StepOptions):
    """Holds the models, the three optimizers and the step counter, and runs the step on a strategy.

    A tf.Module, so `tf.train.Checkpoint(gan=gan)` saves all of it, loss-scale state included. Build
    the models inside `strategy.scope()`; the optimizers and the step are made in it here.
    """

    def __init__(self, models, num_classes, policy, jit=True, strategy=None, sync_bn=True, learning_rates=None,
                 q_learns_from_fakes=True, g_learns_from_q=True, beta_1=BETA_1, augment=None, loss="nonsaturating"):
        super().__init__(name="acgan")
        self.strategy = strategy or tf.distribute.get_strategy()
        self.replicas = self.strategy.num_replicas_in_sync
        self.models = models
        self.num_classes = num_classes
        self.noise_dim = models.generator.input[0].shape[-1]
        self.synchronized_batch_norm = bool(sync_bn and self.replicas > 1)
        if self.synchronized_batch_norm:
            distribute.synchronize_batch_norm(models)
        self.set_options(learning_rates, q_learns_from_fakes, g_learns_from_q, beta_1, augment, loss)
        d_rate, g_rate, q_rate = self.learning_rates
        with self.strategy.scope():
            self.d_optimizer = precision.make_optimizer(d_rate, self.beta_1, policy, "d_optimizer")
            self.g_optimizer = precision.make_optimizer(g_rate, self.beta_1, policy, "g_optimizer")
            self.q_optimizer = precision.make_optimizer(q_rate, self.beta_1, policy, "q_optimizer")
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
            m = models
            self.d_variables = m.trunk.trainable_variables + m.d_head.trainable_variables
            self.g_variables = m.generator.trainable_variables
            # Q trains the shared trunk, its head and (with g_learns_from_q) G: the mutual-information term.
            self.q_variables = m.trunk.trainable_variables + m.q_head.trainable_variables + (
                m.generator.trainable_variables if self.g_learns_from_q else [])
            for optimizer, variables in self._optimizers_and_variables():
                optimizer.build(variables)
            # Consecutive skipped steps per optimizer, for the divergence check between metric reads.
            # Not checkpointed: a resumed run starts counting afresh, as the monitor always did.
            self._scratch = _Untracked()
            self._scratch.skip_streak = tf.Variable(tf.zeros(len(OPTIMIZER_NAMES), tf.int64), trainable=False,
                                                    name="skip_streak")
        self.compile_mode, self.compile_reason = distribute.compile_plan(
            self.strategy, jit, self.synchronized_batch_norm)
        self.retrace()

    def retrace(self):
        """(Re)builds the step functions; call it after patching anything the step calls."""
        per_replica_xla = self.compile_mode == "forward_backward"

        def compiled(fn):
            return tf.function(fn, jit_compile=True) if per_replica_xla else fn

        self._g_pass = compiled(self._g_forward)
        self._d_pass = compiled(self._d_forward_backward)
        self._gq_pass = compiled(self._gq_forward_backward)
        self._step_function = tf.function(self._step, jit_compile=self.compile_mode == "step")

    def train_step(self, images, labels, z, fake_labels):
        """One global step (see _step); returns its StepMetrics without waiting for the device."""
        return StepMetrics(self._step_function(images, labels, z, fake_labels))

    def _optimizers_and_variables(self):
        return (
            (self.d_optimizer, self.d_variables),
            (self.g_optimizer, self.g_variables),
            (self.q_optimizer, self.q_variables),
        )

    def _step(self, images, labels, z, fake_labels):
        """One global step. Arguments are global batches (or per-replica values from a distributed
        dataset): uint8 images [B, H, W, C], int labels [B], z [B, noise_dim], int fake_labels [B].
        Returns this step's metrics as one float32 vector in METRIC_NAMES order."""
        optimizers = [optimizer for optimizer, _ in self._optimizers_and_variables()]
        iterations_before = tf.stack([tf.cast(o.iterations, tf.int64) for o in optimizers])
        per_replica = self.strategy.run(self._replica_step, args=(images, labels, z, fake_labels, self.step.value()))
        # Each replica returns its share (local mean / replicas), so the sum is the global-batch mean.
        loss_values = self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
        self.step.assign_add(1)
        iterations = tf.stack([tf.cast(o.iterations, tf.int64) for o in optimizers])
        # A loss-scale optimizer skips a non-finite step without advancing `iterations`.
        skipped_now = tf.equal(iterations, iterations_before)
        streak = self._scratch.skip_streak
        streak.assign(tf.where(skipped_now, streak + 1, tf.zeros_like(streak)))
        scales = tf.stack([tf.cast(precision.current_loss_scale(o), tf.float32) for o in optimizers])
        skipped = tf.cast(self.step - iterations, tf.float32)
        return tf.concat([loss_values, scales, skipped, tf.cast(streak, tf.float32)], axis=0)

    def _replica_step(self, images, labels, z, fake_labels, step):
        real = tf.cast(images, tf.float32) / 255.0
        labels = tf.cast(labels, tf.int32)
        # The iteration's one G forward, recorded for G's backward pass at the end.
        with tf.GradientTape(persistent=True) as g_tape:
            fake = self._g_pass(z, fake_labels)
            if self.augment:  # inside the tape: G's gradients pass back through the augmentation
                fake = self._augmented(fake, step, augment_lib.FAKE)
        if self.augment:
            real = self._augmented(real, step, augment_lib.REAL)
        d_loss, d_grads = self._d_pass(real, tf.stop_gradient(fake), labels, fake_labels)
        self._apply(self.d_optimizer, d_grads, self.d_variables)
        # G and Q through the freshly updated D: gradients for the trunk and Q head, and the cotangents
        # of G's and Q's (scaled) losses with respect to the fake images.
        g_loss, q_loss, q_accuracy_real, q_accuracy_fake, q_head_grads, g_cotangent, q_cotangent = \
            self._gq_pass(real, labels, tf.stop_gradient(fake), fake_labels)
        g_grads = g_tape.gradient(fake, self.g_variables, output_gradients=g_cotangent)
        q_g_grads = (g_tape.gradient(fake, self.g_variables, output_gradients=q_cotangent)
                     if self.g_learns_from_q else [])
        del g_tape
        self._apply(self.g_optimizer, g_grads, self.g_variables)
        self._apply(self.q_optimizer, list(q_head_grads) + list(q_g_grads), self.q_variables)
        return tf.stack([d_loss, g_loss, q_loss, q_accuracy_real, q_accuracy_fake])

    def _augmented(self, images, step, salt):
        """`images` augmented with this step's draws for this replica's share of the global batch."""
        batch = tf.shape(images)[0]
        offset = tf.distribute.get_replica_context().replica_id_in_sync_group * batch
        return augment_lib.augment(images, augment_lib.draws(step, batch, salt, offset), self.augment)

    def _apply(self, optimizer, grads, variables):
        # Sparse gradients (acgan_cifar's class embedding: tf.IndexedSlices, one slice per image) made
        # dense first: Keras 3.15's Adam squares an IndexedSlices slice by slice before summing repeated
        # indices, so a class seen k times got velocity sum(g_i^2) instead of (sum g_i)^2 (the JAX step's,
        # whose gradients are dense). See docs/development.md.
        grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        if precision.is_loss_scaled(optimizer):
            grads = distribute.agree_on_finite(grads)
        optimizer.apply(grads, variables)

    def _g_forward(self, z, fake_labels):
        return self.models.generator([z, fake_labels], training=True)

    def _d_forward_backward(self, real, fake, labels, fake_labels):
        """D's loss (this replica's share) and its still-scaled gradients; `fake` is a constant here. D's
        head gets each image's label (the real one; the one G was asked for) when it is class-conditional."""
        m = self.models
        with tf.GradientTape() as tape:
            d_real = m.d_head(d_head_inputs(m.d_head, m.trunk(real, training=True), labels), training=True)
            d_fake = m.d_head(d_head_inputs(m.d_head, m.trunk(fake, training=True), fake_labels), training=True)
            d_loss = losses.d_adversarial(self.loss, d_real, d_fake) / self.replicas
            scaled = precision.scale_loss(self.d_optimizer, d_loss)
        return tf.cast(d_loss, tf.float32), tape.gradient(scaled, self.d_variables)

    def _gq_forward_backward(self, real, labels, fake, fake_labels):
        """G's and Q's losses and accuracies (this replica's shares), Q's still-scaled gradients for the
        trunk and its head, and the still-scaled cotangents of G's and Q's losses w.r.t. `fake` (Q's None
        when G does not learn from Q).

        The trunk already saw these real and fake batches in D's pass, so here its batch-norm layers use
        the batch statistics without moving their averages again (a StatelessScope drops the updates).
        """
        m = self.models
        q_trunk_and_head = m.trunk.trainable_variables + m.q_head.trainable_variables
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(fake)
            # One scope per call: inside a scope a state update is visible to the next read, so with one
            # scope the real batch would see the spectral norms' u as the fake batch's call left it (a
            # further power-iteration step), where the JAX step gives both calls D's state.
            with keras.StatelessScope():
                fake_features = m.trunk(fake, training=True)
            with keras.StatelessScope():
                real_features = m.trunk(real, training=True)
            d_fake = m.d_head(d_head_inputs(m.d_head, fake_features, fake_labels), training=True)
            g_loss = losses.g_adversarial(self.loss, d_fake) / self.replicas
            q_real = m.q_head(real_features, training=True)
            q_fake = m.q_head(fake_features, training=True)
            q_real_loss = losses.ce(labels, q_real) / self.replicas
            q_loss = q_real_loss + losses.ce(fake_labels, q_fake) / self.replicas
            g_scaled = precision.scale_loss(self.g_optimizer, g_loss)
            q_scaled = precision.scale_loss(self.q_optimizer, q_loss)
            if not self.q_learns_from_fakes:  # the trunk and Q head then learn from the real batch alone
                q_real_scaled = precision.scale_loss(self.q_optimizer, q_real_loss)
        g_cotangent = tape.gradient(g_scaled, fake)
        q_cotangent = None
        if self.q_learns_from_fakes and self.g_learns_from_q:  # one backward pass: Q's gradients and G's cotangent
            *q_grads, q_cotangent = tape.gradient(q_scaled, q_trunk_and_head + [fake])
        else:
            q_grads = tape.gradient(q_scaled if self.q_learns_from_fakes else q_real_scaled, q_trunk_and_head)
            if self.g_learns_from_q:
                q_cotangent = tape.gradient(q_scaled, fake)
        del tape
        return (tf.cast(g_loss, tf.float32), tf.cast(q_loss, tf.float32), _accuracy(labels, q_real) / self.replicas,
                _accuracy(fake_labels, q_fake) / self.replicas, q_grads, g_cotangent, q_cotangent)

    def set_learning_rate_scale(self, scale):
        """Sets each optimizer's learning rate to its preset rate times `scale` (the step reads the
        variables, so no retrace)."""
        for (optimizer, _), rate in zip(self._optimizers_and_variables(), self.learning_rates):
            precision.learning_rate_variable(optimizer).assign(rate * scale)
        self.learning_rate_scale = scale

    def sync_variables(self):
        """Nothing to copy: on TensorFlow the Keras variables are the step's state (jax_step's counterpart
        writes its state back into them)."""

    def skipped_steps(self):
        """{optimizer name: steps it skipped so far}."""
        return {name: int(self.step.numpy()) - int(optimizer.iterations.numpy())
                for name, (optimizer, _) in zip(OPTIMIZER_NAMES, self._optimizers_and_variables())}

    def loss_scales(self):
        """{optimizer name: current loss scale} (1.0 where there is no loss scaling)."""
        # Through a tensor: float() of a Keras variable holding a MirroredVariable raises.
        return {name: float(tf.convert_to_tensor(precision.current_loss_scale(optimizer)))
                for name, (optimizer, _) in zip(OPTIMIZER_NAMES, self._optimizers_and_variables())}

    def weights_fingerprint(self):
        """sha256 of every model weight, BN statistics included (this worker's first replica).

        Replicas and workers of one run hold equal weights, so their fingerprints match."""
        digest = hashlib.sha256()
        for model in self.models:
            for variable in model.variables:
                digest.update(np.ascontiguousarray(variable.numpy()).tobytes())
        return digest.hexdigest()

    def generate(self, z, labels):
        """Images [B, H, W, C] float32 in [0, 1], inference mode (BN moving statistics)."""
        return self.models.generator([z, labels], training=False)
