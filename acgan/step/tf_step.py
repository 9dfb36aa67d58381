"""The AC-GAN train step: a D update, then G and Q updates, each by its own (loss-scaled) optimizer.

The step runs on a tf.distribute strategy (one device by default); G's noise comes with each batch.
"""
import hashlib

import keras
import numpy as np
import tensorflow as tf

from acgan.model import precision
from acgan.step import distribute

D_LEARNING_RATE = 2e-4
G_LEARNING_RATE = 1e-3
Q_LEARNING_RATE = 1e-3
BETA_1 = 0.5
OPTIMIZER_NAMES = ("d", "g", "q")


def _bce(target, logits):
    return keras.ops.mean(keras.losses.binary_crossentropy(target, logits, from_logits=True))


def _ce(labels, logits):
    return keras.ops.mean(
        keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    )


def _accuracy(labels, logits):
    predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
    return tf.reduce_mean(tf.cast(tf.equal(predicted, labels), tf.float32))


class ACGAN(tf.Module):
    """Holds the models, the three optimizers and the step counter, and runs the step on a strategy.

    A tf.Module, so `tf.train.Checkpoint(gan=gan)` saves all of it, loss-scale state included. Build
    the models inside `strategy.scope()`; the optimizers and the step are made in it here.
    """

    def __init__(self, models, num_classes, policy, jit=True, strategy=None, sync_bn=True):
        super().__init__(name="acgan")
        self.strategy = strategy or tf.distribute.get_strategy()
        self.replicas = self.strategy.num_replicas_in_sync
        self.models = models
        self.num_classes = num_classes
        self.noise_dim = models.generator.input[0].shape[-1]
        self.synchronized_batch_norm = bool(sync_bn and self.replicas > 1)
        if self.synchronized_batch_norm:
            distribute.synchronize_batch_norm(models)
        with self.strategy.scope():
            self.d_optimizer = precision.make_optimizer(D_LEARNING_RATE, BETA_1, policy, "d_optimizer")
            self.g_optimizer = precision.make_optimizer(G_LEARNING_RATE, BETA_1, policy, "g_optimizer")
            self.q_optimizer = precision.make_optimizer(Q_LEARNING_RATE, BETA_1, policy, "q_optimizer")
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
            m = models
            self.d_variables = m.trunk.trainable_variables + m.d_head.trainable_variables
            self.g_variables = m.generator.trainable_variables
            # Q trains the shared trunk, its head and G (the mutual-information term reaches G).
            self.q_variables = (
                m.trunk.trainable_variables + m.q_head.trainable_variables + m.generator.trainable_variables
            )
            for optimizer, variables in self._optimizers_and_variables():
                optimizer.build(variables)
        self.compile_mode, self.compile_reason = distribute.compile_plan(
            self.strategy, jit, self.synchronized_batch_norm)
        self.retrace()

    def retrace(self):
        """(Re)builds the step functions; call it after patching anything the step calls."""
        per_replica_xla = self.compile_mode == "forward_backward"
        self._d_pass = tf.function(self._d_forward_backward, jit_compile=True) if per_replica_xla \
            else self._d_forward_backward
        self._gq_pass = tf.function(self._gq_forward_backward, jit_compile=True) if per_replica_xla \
            else self._gq_forward_backward
        self.train_step = tf.function(self._step, jit_compile=self.compile_mode == "step")

    def _optimizers_and_variables(self):
        return (
            (self.d_optimizer, self.d_variables),
            (self.g_optimizer, self.g_variables),
            (self.q_optimizer, self.q_variables),
        )

    def _step(self, images, labels, z, fake_labels):
        """One global step. Arguments are global batches (or per-replica values from a distributed
        dataset): uint8 images [B, H, W, C], int labels [B], z [B, noise_dim], int fake_labels [B].
        Returns this step's metrics (scalars)."""
        per_replica = self.strategy.run(self._replica_step, args=(images, labels, z, fake_labels))
        # Each replica returns its share (local mean / replicas), so the sum is the global-batch mean.
        metrics = {k: self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
                   for k, v in per_replica.items()}
        self.step.assign_add(1)
        for name, (optimizer, _) in zip(OPTIMIZER_NAMES, self._optimizers_and_variables()):
            metrics[f"{name}_loss_scale"] = tf.cast(precision.current_loss_scale(optimizer), tf.float32)
            # A loss-scale optimizer skips a non-finite step without advancing `iterations`.
            metrics[f"{name}_skipped"] = self.step - tf.cast(optimizer.iterations, tf.int64)
        return metrics

    def _replica_step(self, images, labels, z, fake_labels):
        real = tf.cast(images, tf.float32) / 255.0
        labels = tf.cast(labels, tf.int32)
        d_loss, d_grads = self._d_pass(real, z, fake_labels)
        self._apply(self.d_optimizer, d_grads, self.d_variables)
        # G and Q from one forward pass through the freshly updated D.
        g_loss, q_loss, q_accuracy_real, q_accuracy_fake, g_grads, q_grads = self._gq_pass(
            real, labels, z, fake_labels)
        self._apply(self.g_optimizer, g_grads, self.g_variables)
        self._apply(self.q_optimizer, q_grads, self.q_variables)
        return {"d_loss": d_loss, "g_loss": g_loss, "q_loss": q_loss,
                "q_accuracy_real": q_accuracy_real, "q_accuracy_fake": q_accuracy_fake}

    def _apply(self, optimizer, grads, variables):
        if precision.is_loss_scaled(optimizer):
            grads = distribute.agree_on_finite(grads)
        optimizer.apply(grads, variables)

    def _d_forward_backward(self, real, z, fake_labels):
        """D's loss (this replica's share) and its still-scaled gradients."""
        m = self.models
        batch = tf.shape(real)[0]
        with tf.GradientTape() as tape:
            fake = m.generator([z, fake_labels], training=True)
            d_real = m.d_head(m.trunk(real, training=True), training=True)
            d_fake = m.d_head(m.trunk(fake, training=True), training=True)
            d_loss = (_bce(tf.ones((batch, 1)), d_real) + _bce(tf.zeros((batch, 1)), d_fake)) / self.replicas
            scaled = precision.scale_loss(self.d_optimizer, d_loss)
        return d_loss, tape.gradient(scaled, self.d_variables)

    def _gq_forward_backward(self, real, labels, z, fake_labels):
        """G's and Q's losses and accuracies (this replica's shares) and their still-scaled gradients."""
        m = self.models
        batch = tf.shape(real)[0]
        with tf.GradientTape(persistent=True) as tape:
            fake = m.generator([z, fake_labels], training=True)
            fake_features = m.trunk(fake, training=True)
            real_features = m.trunk(real, training=True)
            g_loss = _bce(tf.ones((batch, 1)), m.d_head(fake_features, training=True)) / self.replicas
            q_real = m.q_head(real_features, training=True)
            q_fake = m.q_head(fake_features, training=True)
            q_loss = (_ce(labels, q_real) + _ce(fake_labels, q_fake)) / self.replicas
            g_scaled = precision.scale_loss(self.g_optimizer, g_loss)
            q_scaled = precision.scale_loss(self.q_optimizer, q_loss)
        g_grads = tape.gradient(g_scaled, self.g_variables)
        q_grads = tape.gradient(q_scaled, self.q_variables)
        del tape
        return (g_loss, q_loss, _accuracy(labels, q_real) / self.replicas,
                _accuracy(fake_labels, q_fake) / self.replicas, g_grads, q_grads)

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
