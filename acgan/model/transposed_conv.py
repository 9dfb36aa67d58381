"""Conv2DTranspose whose passes on JAX are written as the strided convolution's own.

A transposed convolution is the adjoint of a strided convolution c(z) = conv(z, kernel): y = c^T(x). Left
to autodiff, JAX differentiates the lhs-dilated convolution that computes y, and XLA's GPU compiler
turns the kernel's gradient into a forward convolution with a dilated 14x14 window, which cuDNN runs
without Tensor Cores in float32: most of the float32 step's time on an H200, see
docs/jax-and-gpus.md#transposed-convolutions. Written out, the same gradients are ordinary
strided-convolution passes:

    dx      = c(dy)                             a forward convolution
    dkernel = the vjp of k -> conv(dy, k) at x  a convolution's filter gradient

--jax_conv_transpose (Config.jax_conv_transpose, model/jax_formulations.py) picks the formulation on JAX:

- adjoint (the default): Keras's forward pass (the same numbers), the gradients above (the same sums
  in another order).
- linear_transpose: the forward pass too as c's transpose (jax.linear_transpose), which is the pattern
  XLA's GPU compiler maps to cuDNN's backward-input convolution: a convolution of the lhs-dilated input
  with the reversed kernel. Keras's forward feeds the convolution a transposed (for one output channel,
  reshaped) reversed kernel, which that rewrite does not match, so XLA pads the dilated input and runs
  a plain convolution. On a CPU both forwards give the same bits.
- autodiff: keras.layers.Conv2DTranspose unchanged, to measure what the others buy.

On TensorFlow the layer is keras.layers.Conv2DTranspose. Variables, names and checkpoints are the same
in every formulation.
"""

import functools

import keras

from acgan.model import jax_formulations


@keras.saving.register_keras_serializable(package="acgan")
class TransposedConv2D(keras.layers.Conv2DTranspose):
    """keras.layers.Conv2DTranspose (channels_last, no output padding or dilation), with the strided
    convolution's passes on JAX."""

    def call(self, inputs):
        which = (
            jax_formulations.conv_transpose() if keras.backend.backend() == "jax" else "autodiff"
        )
        if which == "autodiff":
            return super().call(inputs)
        # in the compute dtype (the layer autocasts)
        kernel = keras.ops.convert_to_tensor(self.kernel)
        outputs = _adjoint_conv_transpose(tuple(self.strides), self.padding, which)(inputs, kernel)
        if self.use_bias:
            outputs = keras.ops.add(outputs, keras.ops.reshape(self.bias, (1, 1, 1, self.filters)))
        return outputs if self.activation is None else self.activation(outputs)


@functools.lru_cache(maxsize=None)
def _adjoint_conv_transpose(strides, padding, which):
    """jax.custom_vjp: the forward pass (Keras's, or c's linear transpose); the gradients of the strided
    convolution c it is the adjoint of."""
    import jax  # here: only the JAX backend calls this; a TensorFlow process never loads JAX

    def strided(
        z, kernel
    ):  # c: [B, H*s, W*s, filters] -> [B, H, W, in]; kernel [kh, kw, filters, in]
        return keras.ops.conv(z, kernel, strides=list(strides), padding=padding)

    def keras_forward(x, kernel):
        return keras.ops.conv_transpose(x, kernel, strides=list(strides), padding=padding)

    def forward(x, kernel):
        if which == "adjoint":
            return keras_forward(x, kernel)
        # c's input: the shape Keras's forward gives
        y_shape = jax.eval_shape(keras_forward, x, kernel)
        (y,) = jax.linear_transpose(lambda z: strided(z, kernel), y_shape)(x)
        return y

    conv_transpose = jax.custom_vjp(forward)

    def fwd(x, kernel):
        return forward(x, kernel), (x, kernel)

    def bwd(saved, dy):
        x, kernel = saved
        dx, pull = jax.vjp(lambda k: strided(dy, k), kernel)
        (dkernel,) = pull(x)
        return dx.astype(x.dtype), dkernel.astype(kernel.dtype)

    conv_transpose.defvjp(fwd, bwd)
    return conv_transpose
