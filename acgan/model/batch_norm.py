"""BatchNormalization whose training pass on JAX can read the activations once for its statistics.

Keras's JAX path takes the batch's mean and variance in two passes (jnp.mean, then jnp.var, which
subtracts the mean and squares), normalises in a third, and autodiff adds several reductions to the
backward pass. With --jax_batch_norm fused (model/jax_formulations.py) a training call is instead one
jax.custom_vjp:

    forward   one reduction pass for sum(x - k) and sum((x - k)^2) per channel, then y = x * inv + offset
    backward  one reduction pass for sum(dy) and sum(dy * xhat), then dx elementwise

each "one pass" two sibling sums, which XLA's GPU compiler is expected to fuse into one kernel (on a CPU
they stay two): the same function (biased variance, Keras's epsilon and momentum), its numbers equal to
Keras's up to rounding. The default, keras, is keras.layers.BatchNormalization's own call, so training
is unchanged bit for bit; so is every call on TensorFlow, in inference, with a mask or renorm, or when
frozen.
Variables, names, config and checkpoints are the layer's either way.
"""

import functools

import keras

from acgan.model import jax_formulations


@keras.saving.register_keras_serializable(package="acgan")
class BatchNorm(keras.layers.BatchNormalization):
    """keras.layers.BatchNormalization, with a fused training pass on JAX under --jax_batch_norm fused
    (read when the layer is traced)."""

    def call(self, inputs, training=None, mask=None):
        if (
            keras.backend.backend() != "jax"
            or jax_formulations.batch_norm() == "keras"
            or not (training and self.trainable)
            or mask is not None
            or self.renorm
        ):
            return super().call(inputs, training=training, mask=mask)
        ops = keras.ops
        # As Keras: a float32 layer's inputs arrive autocast to float32 (Layer.__call__); half-precision
        # ones would be cast here. (Keras's result_type maps float64 to float32 on JAX, so a float64 layer
        # computes in float32 too, in Keras's call and here alike.)
        dtype = keras.backend.result_type(inputs.dtype, "float32")
        inputs = ops.cast(inputs, dtype)
        channels = inputs.shape[self.axis]
        gamma = ops.cast(self.gamma, dtype) if self.scale else ops.ones((channels,), dtype)
        beta = ops.cast(self.beta, dtype) if self.center else ops.zeros((channels,), dtype)
        axis = self.axis % len(inputs.shape)
        outputs, mean, variance = fused_batch_norm(axis, self.epsilon)(
            inputs, gamma, beta, ops.stop_gradient(ops.cast(self.moving_mean, dtype))
        )
        for moving, batch in ((self.moving_mean, mean), (self.moving_variance, variance)):
            moving.assign(
                ops.cast(moving, dtype) * self.momentum
                + ops.stop_gradient(batch) * (1.0 - self.momentum)
            )
        return ops.cast(outputs, self.compute_dtype)


@functools.lru_cache(maxsize=None)
def fused_batch_norm(axis, epsilon):
    """jax.custom_vjp (x, gamma, beta, shift) -> (y, mean, variance): batch normalisation over every axis
    of x but `axis` (the channels), its statistics taken in one pass. shift: any per-channel value near
    the mean (the layer passes its moving mean); it changes only rounding, and its cotangent is zero.
    mean and variance are differentiable outputs too (their cotangents reach dx)."""
    import jax  # here: only the JAX backend calls this; a TensorFlow process never loads JAX
    import jax.numpy as jnp

    def layout(x):
        """How many values each channel's statistics read, and the shape that lines a channel vector up
        with x."""
        return x.size // x.shape[axis], tuple(-1 if i == axis else 1 for i in range(x.ndim))

    def sums(a, b, x):
        """Per channel, (sum(a), sum(b)), a and b elementwise functions of the same arrays: XLA's GPU
        compiler fuses the two sibling reductions into one kernel, one read of those arrays. (One variadic
        lax.reduce would say so outright, but XLA's CPU compiler sums that sequentially: 7 times the
        rounding error of jnp.sum's over 3136 values.)"""
        axes = tuple(i for i in range(x.ndim) if i != axis)
        return jnp.sum(a, axes), jnp.sum(b, axes)

    def forward(x, gamma, beta, shift):
        count, shape = layout(x)
        # One pass needs the sum of squares, and var = E[x^2] - E[x]^2 loses about log2(1 + mean^2/var)
        # bits to cancellation. Any per-channel k leaves var = E[(x-k)^2] - E[x-k]^2 exact and shrinks the
        # loss to log2(1 + (mean-k)^2/var): with k the moving mean, near the batch's once training has
        # settled, nothing is lost; at the start (k = 0) it is the plain formula. The clamp keeps rounding
        # from making var negative.
        centred = x - jnp.reshape(shift, shape)
        total, squares = sums(centred, centred * centred, x)
        offset = total / count
        mean = shift + offset
        variance = jnp.maximum(squares / count - offset * offset, 0)
        inv_std = jax.lax.rsqrt(variance + epsilon)
        # Keras's order of operations (backend batch_normalization)
        inv = jnp.reshape(inv_std * gamma, shape)
        y = jnp.add(x * inv, jnp.reshape(beta, shape) - jnp.reshape(mean, shape) * inv)
        return (y, mean, variance), (x, gamma, mean, inv_std, shift)

    @jax.custom_vjp
    def batch_norm(x, gamma, beta, shift):
        return forward(x, gamma, beta, shift)[0]

    def backward(saved, cotangents):
        x, gamma, mean, inv_std, shift = saved
        dy, dmean, dvariance = cotangents
        count, shape = layout(x)
        centred = x - jnp.reshape(mean, shape)
        xhat = centred * jnp.reshape(inv_std, shape)
        dbeta, dgamma = sums(dy, dy * xhat, x)
        # y's cotangent through the batch statistics (the standard batch-norm gradient), then the mean's
        # (d mean / dx = 1/N) and the variance's (d var / dx = 2 (x - mean) / N, biased): the layer stops
        # their gradients, so those two are zeros, added in the same elementwise pass (no extra read).
        scale = jnp.reshape(gamma * inv_std / count, shape)
        dx = scale * (count * dy - jnp.reshape(dbeta, shape) - xhat * jnp.reshape(dgamma, shape))
        dx = (
            dx
            + jnp.reshape(dmean / count, shape)
            + centred * jnp.reshape(2 * dvariance / count, shape)
        )
        return dx, dgamma, dbeta, jnp.zeros_like(shift)

    batch_norm.defvjp(forward, backward)
    return batch_norm
