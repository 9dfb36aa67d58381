"""TensorFlowStep: the AC-GAN iteration (algorithm.py) on a tf.distribute strategy's variables (one device
by default), and the train step's contract (base.py) around it.

Each replica runs the iteration on its share of the global batch (`strategy.run`); the losses are each
replica's share, so the summed gradients are the global batch's. What TensorFlow supplies to the
iteration (algorithm.Backend): G's one forward on a persistent tape that G's backward reads, D's and
G/Q's gradients from tapes (one persistent tape for G and Q), optimizers applying in place, and the
loss-scale guard across replicas. XLA compiles the whole step with one replica, each replica's forward
and backward passes with several (distribute.compile_plan). The metrics come back as one float32 vector
(StepMetrics), so the host reads them with one copy.
"""

import keras
import tensorflow as tf

from acgan import presets
from acgan.model import precision
from acgan.step import algorithm, distribute
from acgan.step import augment as augment_lib
from acgan.step.base import StepBase

# The backend-neutral names live in common.py; re-exported so `from acgan.step.tf_step import ...` keeps working.
from acgan.step.common import (  # noqa: F401
    LOSS_METRICS,
    METRIC_NAMES,
    MODEL_NAMES,
    OPTIMIZER_NAMES,
    StepMetrics,
)


class _Untracked:
    """Holds state that the checkpoint must not contain (tf.Module tracks only trackable attributes)."""


class _KerasNetworks(algorithm.Networks):
    """algorithm.Networks on the Keras models' own variables: a call of a model named in `moving` moves
    its batch-norm statistics, any other runs in its own keras.StatelessScope, which drops the updates
    (one scope per call: inside a scope a state update is visible to the next read, so with one scope the
    real batch would see the spectral norms' u as the fake batch's call left it, where the JAX step gives
    both calls the state as it stands)."""

    def __init__(self, models, moving):
        self.models, self.moving = dict(zip(MODEL_NAMES, models)), moving

    def _call(self, name, inputs):
        model = self.models[name]
        if name in self.moving:
            return model(inputs, training=True)
        with keras.StatelessScope():
            return model(inputs, training=True)


class TensorFlowStep(tf.Module, StepBase, algorithm.Backend):
    """Holds the models, the three optimizers and the step counter, and runs the step on a strategy.

    A tf.Module, so `tf.train.Checkpoint(gan=trainer)` saves all of it, loss-scale state included. Build
    the models inside `strategy.scope()`; the optimizers and the step are made in it here. `preset`: the
    acgan.presets.Preset whose settings it trains with (its loss resolved; factory.build_step gives it).
    """

    def __init__(
        self, models, num_classes, preset=presets.REFERENCE, jit=True, strategy=None, sync_bn=True
    ):
        super().__init__(name="acgan")
        self.strategy = strategy or tf.distribute.get_strategy()
        self.replicas = self.strategy.num_replicas_in_sync
        self._set_up(models, num_classes, preset)
        self.synchronized_batch_norm = bool(sync_bn and self.replicas > 1)
        if self.synchronized_batch_norm:
            distribute.synchronize_batch_norm(models)
        with self.strategy.scope():
            self._make_optimizers()
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
            self._build_optimizers()
            # Consecutive skipped steps per optimizer, for the divergence check between metric reads.
            # Not checkpointed: a resumed run starts counting afresh, as the monitor always did.
            self._scratch = _Untracked()
            self._scratch.skip_streak = tf.Variable(
                tf.zeros(len(OPTIMIZER_NAMES), tf.int64), trainable=False, name="skip_streak"
            )
            # G's average (G-EMA) of its weights and of its batch-norm statistics, saved as `g_ema` beside
            # `gan` (ema_checkpointable).
            self._scratch.ema = tf.Module(name="g_ema")
            for part, variables in (
                ("weights", self.g_variables),
                ("statistics", self.g_statistics),
            ):
                setattr(
                    self._scratch.ema,
                    part,
                    [
                        tf.Variable(tf.cast(v.value, tf.float32), trainable=False, name="g_ema")
                        for v in variables
                    ]
                    if self.ema_decay
                    else [],
                )
        self.compile_mode, self.compile_reason = distribute.compile_plan(
            self.strategy, jit, self.synchronized_batch_norm
        )
        self.retrace()

    def retrace(self):
        """(Re)builds the step functions; call it after patching anything the step calls."""
        per_replica_xla = self.compile_mode == "forward_backward"

        def compiled(fn):
            return tf.function(fn, jit_compile=True, autograph=False) if per_replica_xla else fn

        self._compiled = compiled
        self._g_pass = compiled(self._g_forward)
        # autograph=False: the step has no Python control flow on tensors to convert (Keras branches with
        # ops.cond), and converting every call it makes cost about a quarter of the CPU time of tracing it.
        self._step_function = tf.function(
            self._step, jit_compile=self.compile_mode == "step", autograph=False
        )

    def train_step(self, images, labels, z, fake_labels):
        """One global step (see _step); returns its StepMetrics without waiting for the device."""
        return StepMetrics(self._step_function(images, labels, z, fake_labels))

    def _step(self, images, labels, z, fake_labels):
        """One global step. Arguments are global batches (or per-replica values from a distributed
        dataset): uint8 images [B, H, W, C], int labels [B], z [B, noise_dim], int fake_labels [B].
        Returns this step's metrics as one float32 vector in METRIC_NAMES order."""
        optimizers = [optimizer for optimizer, _ in self._optimizers_and_variables()]
        iterations_before = tf.stack([tf.cast(o.iterations, tf.int64) for o in optimizers])
        step_before = self.step.read_value()
        per_replica = self.strategy.run(
            self._replica_step, args=(images, labels, z, fake_labels, step_before)
        )
        # Each replica returns its share (local mean / replicas), so the sum is the global-batch mean.
        loss_values = self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
        iterations = tf.stack([tf.cast(o.iterations, tf.int64) for o in optimizers])
        scales = tf.stack(
            [tf.cast(precision.current_loss_scale(o), tf.float32) for o in optimizers]
        )
        # G's weights are equal on every replica: the average is updated once, here.
        averages = self._scratch.ema.weights + self._scratch.ema.statistics
        after = algorithm.after_iteration(
            loss_values,
            scales,
            step_before,
            iterations_before,
            iterations,
            self._scratch.skip_streak,
            self.ema_decay,
            averages,
            [v.value for v in self.g_variables + self.g_statistics],
        )
        for average, value in zip(averages, after.g_ema):
            average.assign(value)
        self.step.assign(after.step)
        self._scratch.skip_streak.assign(after.skip_streak)
        return after.metrics

    def _replica_step(self, images, labels, z, fake_labels, step):
        """One replica's share of the iteration (algorithm.iteration), its losses stacked."""
        real = tf.cast(images, tf.float32) / 255.0
        labels = tf.cast(labels, tf.int32)
        return tf.stack(algorithm.iteration(self, real, labels, z, fake_labels, step))

    # -- algorithm.Backend: the iteration on this replica's variables ---------------------------------
    # Each loss is this replica's share (its mean over the replica's batch / replicas), so the gradients'
    # sum over the replicas is the global batch's.

    def augmented(self, images, step, salt):
        """`images` augmented with this step's draws for this replica's share of the global batch."""
        batch = tf.shape(images)[0]
        offset = tf.distribute.get_replica_context().replica_id_in_sync_group * batch
        return augment_lib.augment(
            images, augment_lib.draws(step, batch, salt, offset), self.augment
        )

    def generator_forward(self, z, labels, step):
        """G's one forward, recorded on a tape that G's backward pass (called once or twice) reads."""
        with tf.GradientTape(persistent=True) as tape:
            fake = self._g_pass(z, labels)
            if self.augment:  # inside the tape: G's gradients pass back through the augmentation
                fake = self.augmented(fake, step, augment_lib.FAKE)

        def backward(cotangent):
            return tape.gradient(fake, self.g_variables, output_gradients=cotangent)

        return tf.stop_gradient(fake), backward

    def share(self, value):
        return value / self.replicas

    def scaled(self, name, loss):
        return precision.scale_loss(self.optimizer(name), loss)

    def gradients(self, losses_fn, x, targets, moving):
        """One forward on a persistent tape, each target's gradients read from it (compiled on its own
        per replica when XLA compiles each pass)."""

        def differentiate(x):
            nets = _KerasNetworks(self.models, moving)
            with tf.GradientTape(persistent=True) as tape:
                if x is not None:
                    tape.watch(x)
                losses, aux = losses_fn(nets, x)
            results = []
            for key, models, by_x in targets:
                variables = [v for m in models for v in getattr(self.models, m).trainable_variables]
                grads = tape.gradient(losses[key], variables + ([x] if by_x else []))
                results.append((grads[: len(variables)], grads[-1] if by_x else None))
            return results, aux

        return self._compiled(differentiate)(x)

    def apply(self, name, grads):
        optimizer, variables = self._optimizers_and_variables()[OPTIMIZER_NAMES.index(name)]
        self._apply(optimizer, grads, variables)

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

    @property
    def ema_checkpointable(self):
        """What a checkpoint saves of G's average, as `g_ema` beside `gan` (an empty module without one)."""
        return self._scratch.ema

    def assign_ema(self, values, statistics):
        """Sets the average to `values` (in generator.trainable_variables' order) and `statistics` (in
        g_statistics' order)."""
        ema = self._scratch.ema
        for average, value in zip(ema.weights + ema.statistics, list(values) + list(statistics)):
            average.assign(tf.cast(value, tf.float32))

    def _host_ema_values(self):
        return [average.numpy() for average in self._scratch.ema.weights]

    def _host_ema_statistics(self):
        return [average.numpy() for average in self._scratch.ema.statistics]

    def _generator_assigned(self):
        """Nothing to copy: on TensorFlow the Keras variables are the step's state."""

    def sync_variables(self):
        """Nothing to copy: on TensorFlow the Keras variables are the step's state (jax_step's counterpart
        writes its state back into them)."""

    def _set_learning_rates(self, rates):
        for (optimizer, _), rate in zip(self._optimizers_and_variables(), rates):
            precision.learning_rate_variable(optimizer).assign(rate)

    def _host_step_and_iterations(self):
        return int(self.step.numpy()), [
            int(o.iterations.numpy()) for o, _ in self._optimizers_and_variables()
        ]

    def _host_loss_scales(self):
        # Through a tensor: float() of a Keras variable holding a MirroredVariable raises.
        return [
            tf.convert_to_tensor(precision.current_loss_scale(o))
            for o, _ in self._optimizers_and_variables()
        ]

    def _host_model_values(self, name, variables):
        return [variable.numpy() for variable in variables]  # this worker's first replica's

    def generate(self, z, labels):
        """Images [B, H, W, C] float32 in [0, 1], inference mode (BN moving statistics); from G's average
        when samples_from_ema, with the batch-norm statistics its `ema_statistics` names."""
        generator = self.models.generator
        if not self.samples_from_ema:
            return generator([z, labels], training=False)
        images, _ = generator.stateless_call(
            [a.value() for a in self._scratch.ema.weights],
            self.sampling_statistics(),
            [z, labels],
            training=False,
        )
        return images
