"""What the TensorFlow step tests that inject overflows into shared trainers have in common
(test_loss_scaling.py, test_distribute.py): the optimizers by name, a trainer's whole state saved and
restored, and precision.scale_loss with a switch per optimizer that the step reads when it runs, so one trace
(one XLA compile) serves the honest steps and every injected overflow."""

import contextlib

import numpy as np
import tensorflow as tf

from acgan.step.common import OPTIMIZER_NAMES


def optimizers(trainer):
    """{"d": D's optimizer, "g": ..., "q": ...}"""
    return {name: trainer.optimizer(name) for name in OPTIMIZER_NAMES}


def state_variables(trainer):
    """Everything a step reads or writes: the models' variables (BN statistics, spectral norms' u), the
    optimizers' (iterations, rate, moments, loss-scale state), the step, the skip streak, G's average."""
    return (
        [v for model in trainer.models for v in model.variables]
        + [v for o in optimizers(trainer).values() for v in o.variables]
        + [trainer.step, trainer._scratch.skip_streak, *trainer.ema_checkpointable.weights]
    )


def save_state(trainer):
    """The trainer's state as host arrays (on several replicas, each variable's first replica's copy)."""
    return [np.array(v.numpy()) for v in state_variables(trainer)]


def restore_state(trainer, state):
    for variable, value in zip(state_variables(trainer), state):
        variable.assign(value)  # in cross-replica context: every replica's copy


class OverflowInjection:
    """precision.scale_loss for a test module: a registered optimizer's scaled loss times its factor variable,
    1 (the honest scaled loss, exactly: x * 1 rounds to x) or inf (an overflow in that loss); every other
    optimizer's is the honest one. The factor is read when the step runs, so flipping it needs no retrace.
    `applied` says where the factor applies: everywhere here; a subclass can narrow it (to one replica)."""

    def __init__(self, honest_scale_loss):
        self.honest_scale_loss = honest_scale_loss
        self.factors = []  # (optimizer, its factor variable)

    def register(self, trainer):
        with trainer.strategy.scope():
            for optimizer in optimizers(trainer).values():
                self.factors.append((optimizer, tf.Variable(1.0, trainable=False)))
        return trainer

    def applied(self, factor, dtype):
        return tf.cast(factor, dtype)

    def scale_loss(self, optimizer, loss):
        scaled = self.honest_scale_loss(optimizer, loss)
        for registered, factor in self.factors:
            if registered is optimizer:
                return scaled * self.applied(factor, scaled.dtype)
        return scaled

    @contextlib.contextmanager
    def overflowing(self, optimizer):
        """The steps inside overflow `optimizer`'s loss."""
        factor = next(f for o, f in self.factors if o is optimizer)
        factor.assign(np.float32("inf"))
        try:
            yield
        finally:
            factor.assign(1.0)
