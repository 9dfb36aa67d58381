"""All of precision: the dtype-policy switch, a policy scope (float32's for the judge), and the loss-scaled
optimizer factory."""

import contextlib

import keras


def set_policy(name):
    """Sets the global Keras dtype policy (a name the settings validated); call it once, before any layer
    is built."""
    keras.mixed_precision.set_global_policy(name)


@contextlib.contextmanager
def policy_scope(name):
    """Builds and loads under policy `name`, then restores whatever global policy was set."""
    previous = keras.mixed_precision.global_policy()
    set_policy(name)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


def float32_policy():
    """policy_scope("float32"): the judge is always float32, whatever policy the process trains under."""
    return policy_scope("float32")


def needs_loss_scaling(policy_name):
    # float16 has 5 exponent bits, so small gradients underflow; bfloat16 has float32's range.
    return policy_name == "mixed_float16"


def make_optimizer(learning_rate, beta_1, policy_name, name):
    """Adam, wrapped in a dynamic LossScaleOptimizer under mixed_float16."""
    adam = keras.optimizers.Adam(learning_rate=learning_rate, beta_1=beta_1, name=f"{name}_adam")
    if needs_loss_scaling(policy_name):
        return keras.optimizers.LossScaleOptimizer(adam, name=name)
    return adam


def is_loss_scaled(optimizer):
    return isinstance(optimizer, keras.optimizers.LossScaleOptimizer)


def scale_loss(optimizer, loss):
    """The loss as the optimizer applying its gradients wants it (scaled only under loss scaling)."""
    return optimizer.scale_loss(loss) if is_loss_scaled(optimizer) else loss


def learning_rate_variable(optimizer):
    """The variable holding the (inner) Adam's learning rate."""
    adam = optimizer.inner_optimizer if is_loss_scaled(optimizer) else optimizer
    return adam._learning_rate  # Keras's Adam keeps a float rate as this variable; no public handle


def current_loss_scale(optimizer):
    """The optimizer's dynamic loss scale, or 1.0 when it does no scaling."""
    return optimizer.dynamic_scale if is_loss_scaled(optimizer) else 1.0
