"""The AC-GAN train step: a D update, then G and Q updates, each by its own (loss-scaled) optimizer."""
import keras
import tensorflow as tf

from acgan import precision

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
    """Holds the models, the three optimizers, the step counter and the noise generator.

    A tf.Module, so `tf.train.Checkpoint(gan=gan)` saves all of it, loss-scale state included.
    """

    def __init__(self, models, num_classes, policy, seed=0, jit=True):
        super().__init__(name="acgan")
        self.models = models
        self.num_classes = num_classes
        self.noise_dim = models.generator.input[0].shape[-1]
        self.d_optimizer = precision.make_optimizer(D_LEARNING_RATE, BETA_1, policy, "d_optimizer")
        self.g_optimizer = precision.make_optimizer(G_LEARNING_RATE, BETA_1, policy, "g_optimizer")
        self.q_optimizer = precision.make_optimizer(Q_LEARNING_RATE, BETA_1, policy, "q_optimizer")
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.rng = tf.random.Generator.from_seed(seed)
        m = models
        self.d_variables = m.trunk.trainable_variables + m.d_head.trainable_variables
        self.g_variables = m.generator.trainable_variables
        # Q trains the shared trunk, its head and G (the mutual-information term reaches G).
        self.q_variables = (
            m.trunk.trainable_variables + m.q_head.trainable_variables + m.generator.trainable_variables
        )
        for optimizer, variables in self._optimizers_and_variables():
            optimizer.build(variables)
        self.train_step = tf.function(self._train_step, jit_compile=jit)

    def _optimizers_and_variables(self):
        return (
            (self.d_optimizer, self.d_variables),
            (self.g_optimizer, self.g_variables),
            (self.q_optimizer, self.q_variables),
        )

    def sample_inputs(self, batch):
        """Uniform noise in [-1, 1] (62 dims by default) and uniform class labels."""
        z = self.rng.uniform((batch, self.noise_dim), -1.0, 1.0)
        labels = self.rng.uniform((batch,), 0, self.num_classes, dtype=tf.int32)
        return z, labels

    def _apply(self, optimizer, tape, loss, variables):
        grads = tape.gradient(precision.scale_loss(optimizer, loss), variables)
        optimizer.apply(grads, variables)

    def _train_step(self, images, labels):
        """images: uint8 [B, H, W, C]; labels: int [B]. Returns this step's metrics (scalars)."""
        m = self.models
        real = tf.cast(images, tf.float32) / 255.0
        labels = tf.cast(labels, tf.int32)
        batch = tf.shape(real)[0]
        z, fake_labels = self.sample_inputs(batch)
        ones, zeros = tf.ones((batch, 1)), tf.zeros((batch, 1))

        with tf.GradientTape() as tape:
            fake = m.generator([z, fake_labels], training=True)
            d_real = m.d_head(m.trunk(real, training=True), training=True)
            d_fake = m.d_head(m.trunk(fake, training=True), training=True)
            d_loss = _bce(ones, d_real) + _bce(zeros, d_fake)
            scaled = precision.scale_loss(self.d_optimizer, d_loss)
        self.d_optimizer.apply(tape.gradient(scaled, self.d_variables), self.d_variables)

        # G and Q from one forward pass through the freshly updated D.
        with tf.GradientTape(persistent=True) as tape:
            fake = m.generator([z, fake_labels], training=True)
            fake_features = m.trunk(fake, training=True)
            real_features = m.trunk(real, training=True)
            g_loss = _bce(ones, m.d_head(fake_features, training=True))
            q_real = m.q_head(real_features, training=True)
            q_fake = m.q_head(fake_features, training=True)
            q_loss = _ce(labels, q_real) + _ce(fake_labels, q_fake)
            g_scaled = precision.scale_loss(self.g_optimizer, g_loss)
            q_scaled = precision.scale_loss(self.q_optimizer, q_loss)
        g_grads = tape.gradient(g_scaled, self.g_variables)
        q_grads = tape.gradient(q_scaled, self.q_variables)
        del tape
        self.g_optimizer.apply(g_grads, self.g_variables)
        self.q_optimizer.apply(q_grads, self.q_variables)

        self.step.assign_add(1)
        metrics = {
            "d_loss": d_loss,
            "g_loss": g_loss,
            "q_loss": q_loss,
            "q_accuracy_real": _accuracy(labels, q_real),
            "q_accuracy_fake": _accuracy(fake_labels, q_fake),
        }
        for name, (optimizer, _) in zip(OPTIMIZER_NAMES, self._optimizers_and_variables()):
            metrics[f"{name}_loss_scale"] = tf.cast(precision.current_loss_scale(optimizer), tf.float32)
            # A loss-scale optimizer skips a non-finite step without advancing `iterations`.
            metrics[f"{name}_skipped"] = self.step - tf.cast(optimizer.iterations, tf.int64)
        return metrics

    def skipped_steps(self):
        """{optimizer name: steps it skipped so far}."""
        return {name: int(self.step.numpy()) - int(optimizer.iterations.numpy())
                for name, (optimizer, _) in zip(OPTIMIZER_NAMES, self._optimizers_and_variables())}

    def loss_scales(self):
        """{optimizer name: current loss scale} (1.0 where there is no loss scaling)."""
        return {name: float(precision.current_loss_scale(optimizer))
                for name, (optimizer, _) in zip(OPTIMIZER_NAMES, self._optimizers_and_variables())}

    def generate(self, z, labels):
        """Images [B, H, W, C] float32 in [0, 1], inference mode (BN moving statistics)."""
        return self.models.generator([z, labels], training=False)
