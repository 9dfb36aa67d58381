"""JaxIteration: the AC-GAN iteration (algorithm.py) over a JaxStep's state, as arrays traced by jax.jit.

What JAX supplies to the iteration (algorithm.Backend): G's one forward as a jax.vjp whose pullback is
G's backward pass; gradients from jax.grad of functions of the weights; each optimizer's
stateless_apply writing new values into the iteration's `weights` and `optimizers`. The models are
called with stateless_call (`_StatelessNetworks`), so which batch-norm statistics a pass moves is
explicit: G's in its one forward; the trunk's and D head's in D's pass (real, then fake); the Q head's
in the G/Q pass; the rest are dropped. Under mixed_float16 each loss is scaled by its own optimizer's
scale as the state handed to the step holds it (JaxStep.scaled).
"""

import functools

import jax

from acgan.model.networks import d_head_inputs
from acgan.step import algorithm
from acgan.step import augment as augment_lib
from acgan.step.common import MODEL_NAMES


class _StatelessNetworks:
    """algorithm.Networks on arrays: each model's stateless_call with `trainable` ({model name: values}).
    The calls of the models named in `moving` carry their new non-trainable state (batch-norm statistics)
    on to the next call in `state` ({model name: values}, updated in place); the others' is dropped."""

    def __init__(self, models, trainable, state, moving=()):
        self.models = dict(zip(MODEL_NAMES, models))
        self.trainable, self.state, self.moving = trainable, state, moving

    def _call(self, name, inputs):
        outputs, state = self.models[name].stateless_call(
            self.trainable[name], self.state[name], inputs, training=True
        )
        if name in self.moving:
            self.state[name] = state
        return outputs

    def trunk(self, images):
        return self._call("trunk", images)

    def d_head(self, features, labels):
        return self._call("d_head", d_head_inputs(self.models["d_head"], features, labels))

    def q_head(self, features):
        return self._call("q_head", features)


class JaxIteration(algorithm.Backend):
    """One traced iteration of `step` (a jax_step.JaxStep) from `state`: `weights` ({model name:
    {"trainable": [...], "non_trainable": [...]}}) and `optimizers` ({name: [values]}) start as the state's
    and take each update's new values as the iteration goes."""

    def __init__(self, step, state):
        self._step = step
        self.models = step.models
        self.loss, self.augment = step.loss, step.augment
        self.preset, self.g_learns_from_q = step.preset, step.g_learns_from_q
        self.weights = {name: dict(state["models"][name]) for name in MODEL_NAMES}
        self.optimizers = dict(state["optimizers"])

    def _networks(self, moving=(), **trainable):
        """The networks at the weights as they stand, `trainable` ({model name: values}) replacing some."""
        values = {
            name: trainable.get(name, self.weights[name]["trainable"]) for name in MODEL_NAMES
        }
        state = {name: self.weights[name]["non_trainable"] for name in MODEL_NAMES}
        return _StatelessNetworks(self.models, values, state, moving)

    def _scaled(self, name, loss):
        return self._step.scaled(name, self.optimizers[name], loss)

    def augmented(self, images, step, salt):
        return augment_lib.augment(
            images, augment_lib.draws(step, images.shape[0], salt), self.augment
        )

    def generator_forward(self, z, labels, step):
        """G's one forward as a jax.vjp (G's batch-norm statistics move here, once); its pullback is G's
        backward pass."""
        g = self.weights["generator"]
        forward = functools.partial(
            self._g_forward, non_trainable=g["non_trainable"], z=z, labels=labels, step=step
        )
        fake, pullback, g["non_trainable"] = jax.vjp(forward, g["trainable"], has_aux=True)
        return jax.lax.stop_gradient(fake), lambda cotangent: list(pullback(cotangent)[0])

    def _g_forward(self, trainable, non_trainable, z, labels, step):
        """G's images (augmented as D sees them, so G's gradients pass back through the augmentation) and
        G's new batch statistics."""
        images, non_trainable = self.models.generator.stateless_call(
            trainable, non_trainable, [z, labels], training=True
        )
        if self.augment:
            images = self.augmented(images, step, augment_lib.FAKE)
        return images, non_trainable

    def d_loss_and_gradients(self, real, labels, fake, fake_labels):
        n_trunk = len(self.weights["trunk"]["trainable"])

        def loss_fn(d_trainable):
            nets = self._networks(
                ("trunk", "d_head"), trunk=d_trainable[:n_trunk], d_head=d_trainable[n_trunk:]
            )
            d_loss = algorithm.d_loss(nets, self.loss, real, labels, fake, fake_labels)
            return self._scaled("d", d_loss), (d_loss, nets.state["trunk"], nets.state["d_head"])

        trunk, head = self.weights["trunk"], self.weights["d_head"]
        grads, (d_loss, trunk["non_trainable"], head["non_trainable"]) = jax.grad(
            loss_fn, has_aux=True
        )(trunk["trainable"] + head["trainable"])
        return d_loss, grads

    def g_and_q_gradients(self, real, labels, fake, fake_labels, q_from_fakes):
        """Two functions differentiated, as the TensorFlow step's two tape.gradient calls: pulled back
        through one vjp of both losses, an overflow in one (inf * a zero cotangent = NaN) would reach the
        other's gradients. The trunk's forward on the fake batch is then traced twice; under jit XLA
        computes it once."""
        trunk, q_head = self.weights["trunk"], self.weights["q_head"]

        def g_loss_fn(fake_images):
            nets = self._networks()
            g_loss = algorithm.g_loss(nets, self.loss, nets.trunk(fake_images), fake_labels)
            return self._scaled("g", g_loss), g_loss

        def q_loss_fn(trunk_trainable, q_head_trainable, fake_images, learned_from_fakes):
            nets = self._networks(("q_head",), trunk=trunk_trainable, q_head=q_head_trainable)
            fake_features = nets.trunk(fake_images)
            q = algorithm.q_losses(nets, labels, nets.trunk(real), fake_labels, fake_features)
            q_loss = q.real + q.fake
            learned = q_loss if learned_from_fakes else q.real
            return self._scaled("q", learned), (
                q_loss,
                q.accuracy_real,
                q.accuracy_fake,
                nets.state["q_head"],
            )

        g_cotangent, g_loss = jax.grad(g_loss_fn, has_aux=True)(fake)
        # One backward pass gives Q's gradients and its cotangent when both learn from the fake batch.
        fused = q_from_fakes and self.g_learns_from_q
        learned = functools.partial(q_loss_fn, learned_from_fakes=q_from_fakes)
        q_grads, (q_loss, accuracy_real, accuracy_fake, q_head["non_trainable"]) = jax.grad(
            learned, argnums=(0, 1, 2) if fused else (0, 1), has_aux=True
        )(trunk["trainable"], q_head["trainable"], fake)
        q_cotangent = q_grads[2] if fused else None
        if (
            self.g_learns_from_q and not fused
        ):  # L_Q reaches G, but Q's weights learn from real images only
            q_cotangent, _ = jax.grad(
                functools.partial(q_loss_fn, learned_from_fakes=True), argnums=2, has_aux=True
            )(trunk["trainable"], q_head["trainable"], fake)
        return algorithm.GQGradients(
            g_loss=g_loss,
            q_loss=q_loss,
            q_accuracy_real=accuracy_real,
            q_accuracy_fake=accuracy_fake,
            q_grads=list(q_grads[0]) + list(q_grads[1]),
            g_cotangent=g_cotangent,
            q_cotangent=q_cotangent,
        )

    def apply(self, name, grads):
        """Optimizer `name`'s stateless_apply on the weights of the models it trains, as they stand."""
        models = self._step.trained_models[name]
        values = [v for model in models for v in self.weights[model]["trainable"]]
        values, self.optimizers[name] = self._step.optimizer(name).stateless_apply(
            self.optimizers[name], grads, values
        )
        for model in models:
            count = len(self.weights[model]["trainable"])
            self.weights[model]["trainable"], values = values[:count], values[count:]
