"""Conv2DTranspose whose backward pass on JAX is written as the strided convolution's own.

A transposed convolution is the adjoint of a strided convolution c(z) = conv(z, kernel): y = c^T(x). Left
to autodiff, JAX differentiates the lhs-dilated convolution that computes y, and XLA's GPU compiler
turns the kernel's gradient into a forward convolution with a dilated 14x14 window, which cuDNN runs
without Tensor Cores in float32: most of the float32 step's time on an H200, see
docs/jax-and-gpus.md#transposed-convolutions. Written out, the same gradients are ordinary
strided-convolution passes:

    dx      = c(dy)                             a forward convolution
    dkernel = the vjp of k -> conv(dy, k) at x  a convolution's filter gradient

The forward pass is Keras's own (the same numbers); the gradients are the same sums in another order.
On TensorFlow, or with ACGAN_JAX_CONV_TRANSPOSE=autodiff (to measure what it buys), the layer is
keras.layers.Conv2DTranspose unchanged. Variables, names and checkpoints are the same either way.
"""
import functools
import os

import keras

from acgan.errors import UserError

FORMULATION_VARIABLE = "ACGAN_JAX_CONV_TRANSPOSE"   # "adjoint" (default) or "autodiff"


def formulation():
    value = os.environ.get(FORMULATION_VARIABLE, "adjoint").strip().lower() or "adjoint"
    if value not in ("adjoint", "autodiff"):
        raise UserError(f"{FORMULATION_VARIABLE}={value!r}: use adjoint or autodiff")
    return value


@keras.saving.register_keras_serializable(package="acgan")
class TransposedConv2D(keras.layers.Conv2DTranspose):
    """keras.layers.Conv2DTranspose (channels_last, no output padding or dilation), with the adjoint
    backward pass on JAX."""

    def call(self, inputs):
        if keras.backend.backend() != "jax" or formulation() == "autodiff":
            return super().call(inputs)
        kernel = keras.ops.convert_to_tensor(self.kernel)   # in the compute dtype (the layer autocasts)
        outputs = _adjoint_conv_transpose(tuple(self.strides), self.padding)(inputs, kernel)
        if self.use_bias:
            outputs = keras.ops.add(outputs, keras.ops.reshape(self.bias, (1, 1, 1, self.filters)))
        return outputs if self.activation is None else self.activation(outputs)


@functools.lru_cache(maxsize=None)
def _adjoint_conv_transpose(strides, padding):
    """jax.custom_vjp: Keras's conv_transpose forward; the gradients of the strided convolution it is the
    adjoint of."""
    import jax  # here: only the JAX backend calls this; a TensorFlow process never loads JAX

    def forward(x, kernel):
        return keras.ops.conv_transpose(x, kernel, strides=list(strides), padding=padding)

    def strided(z, kernel):  # c: [B, H*s, W*s, filters] -> [B, H, W, in]; kernel [kh, kw, filters, in]
        return keras.ops.conv(z, kernel, strides=list(strides), padding=padding)

    @jax.custom_vjp
    def conv_transpose(x, kernel):
        return forward(x, kernel)

    def fwd(x, kernel):
        return forward(x, kernel), (x, kernel)

    def bwd(saved, dy):
        x, kernel = saved
        dx = strided(dy, kernel)
        _, pull = jax.vjp(lambda k: strided(dy, k), kernel)
        (dkernel,) = pull(x)
        return dx.astype(x.dtype), dkernel.astype(kernel.dtype)

    conv_transpose.defvjp(fwd, bwd)
    return conv_transpose
