"""JaxIteration: the AC-GAN iteration (algorithm.py) over a JaxStep's state, as arrays traced by jax.jit.

What JAX supplies to the iteration (algorithm.Backend): G's one forward as a jax.vjp whose pullback is
G's backward pass; gradients from jax.grad of functions of the weights; each optimizer's
stateless_apply writing new values into the iteration's `weights` and `optimizers`. The models are
called with stateless_call (`_StatelessNetworks`), so which batch-norm statistics a pass moves is
explicit: G's in its one forward; the trunk's and D head's in D's pass (real, then fake); the Q head's
in the G/Q pass; the rest are dropped. Under mixed_float16 each loss is scaled by its own optimizer's
scale as the state handed to the step holds it (`scaled`).
"""

import functools

import jax
import keras

from acgan.model import precision
from acgan.step import algorithm
from acgan.step import augment as augment_lib
from acgan.step.common import MODEL_NAMES


class _StatelessNetworks(algorithm.Networks):
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

    def share(self, value):
        return value  # the step's one program sees the global batch (sharded or not)

    def scaled(self, name, loss):
        """`loss` scaled by optimizer `name`'s loss scale as the state handed to the step holds it."""
        optimizer = self._step.optimizer(name)
        with keras.StatelessScope(
            state_mapping=list(zip(optimizer.variables, self.optimizers[name]))
        ):
            return precision.scale_loss(optimizer, loss)

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

    def gradients(self, losses_fn, x, targets, moving):
        """One jax.grad per target, each of a function of the trainable weights of its models (and of `x`
        when by_x): pulled back through one vjp of several losses, an overflow in one (inf * a zero
        cotangent = NaN) would reach the others' gradients. Each target traces the forward again; under
        jit XLA computes it once. The statistics of the `moving` models come from the last target's
        forward (every target's forward moves them alike)."""
        results = []
        for key, models, by_x in targets:

            def loss_fn(trainable, x, key=key):
                values = {name: self.weights[name]["trainable"] for name in MODEL_NAMES}
                values.update(trainable)
                state = {name: self.weights[name]["non_trainable"] for name in MODEL_NAMES}
                nets = _StatelessNetworks(self.models, values, state, moving)
                losses, aux = losses_fn(nets, x)
                return losses[key], (aux, nets.state)

            trainable = {name: self.weights[name]["trainable"] for name in models}
            grads, (aux, state) = jax.grad(loss_fn, argnums=(0, 1) if by_x else 0, has_aux=True)(
                trainable, x
            )
            weight_grads, x_grad = grads if by_x else (grads, None)
            results.append(([g for name in models for g in weight_grads[name]], x_grad))
        for name in moving:
            self.weights[name]["non_trainable"] = state[name]
        return results, aux

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
