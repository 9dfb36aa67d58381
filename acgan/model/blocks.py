"""Policy-aware building blocks: conv/dense compute in the policy's dtype, BN and outputs in float32.

Layers take the global dtype policy when they are constructed, so these helpers must be called after
`precision.set_policy`. Variables are always float32; under a mixed policy the Keras layer casts its
inputs to the compute dtype (float16 / bfloat16), which is where Tensor Cores earn their keep.
"""

import math

import keras
from keras import layers, ops

from acgan.model.batch_norm import BatchNorm
from acgan.model.transposed_conv import TransposedConv2D

BN_MOMENTUM = 0.9
BN_EPSILON = 1e-5


def init():
    return keras.initializers.RandomNormal(mean=0.0, stddev=0.02)


def channels(base, width):
    """`base * width`, rounded to a multiple of 8 (Tensor Cores want multiples of 8), at least 8."""
    return max(8, int(round(base * width / 8.0)) * 8)


def dense(x, units, name, dtype=None):
    """dtype "float32" for a final layer whose logits feed from_logits losses."""
    return layers.Dense(units, kernel_initializer=init(), dtype=dtype, name=name)(x)


def conv(x, filters, name, kernel=4, strides=2, spectral_norm=False):
    """Convolution, "same" padding; by default 4x4 stride 2 (halves the spatial size). spectral_norm:
    its kernel divided by its largest singular value (SpectralConv2D)."""
    layer = SpectralConv2D if spectral_norm else layers.Conv2D
    return layer(
        filters, kernel, strides=strides, padding="same", kernel_initializer=init(), name=name
    )(x)


class SpectralConv2D(layers.Conv2D):
    """A convolution whose kernel is divided by its largest singular value (Miyato et al., "Spectral
    Normalization for GANs", ICLR 2018): that value, of the kernel reshaped to [taps * in, out], is
    estimated by one power-iteration step per call, its vector u a non-trainable float32 variable that
    moves only in training.

    Unlike keras.layers.SpectralNormalization, which overwrites the wrapped layer's kernel with the
    normalised one on every training call (so the optimizer updates the normalised kernel and the
    gradient ignores sigma), this is the paper's reparametrisation: the trainable kernel stays as the
    optimizer left it and the gradient flows through sigma. sigma is computed in float32.
    """

    def build(self, input_shape):
        super().build(input_shape)
        self.sn_u = self.add_weight(
            shape=(1, self.filters),
            initializer=keras.initializers.RandomNormal(),
            trainable=False,
            autocast=False,
            name="sn_u",
            dtype="float32",
        )

    def call(self, inputs, training=None):
        kernel = ops.cast(self.kernel, "float32")
        w = ops.reshape(kernel, (-1, self.filters))
        v = _unit(ops.matmul(self.sn_u, ops.transpose(w)))
        u = _unit(ops.matmul(v, w))
        sigma = ops.sum(ops.matmul(v, w) * u)
        if training:
            self.sn_u.assign(u)
        outputs = self.convolution_op(inputs, ops.cast(kernel / sigma, self.compute_dtype))
        if self.use_bias:  # channels_last, as every layer here
            outputs = ops.add(outputs, ops.reshape(self.bias, (1, 1, 1, self.filters)))
        return outputs if self.activation is None else self.activation(outputs)


def _unit(x):
    """x / |x|, a constant to the gradient (the power iteration's vectors)."""
    return ops.stop_gradient(x / ops.sqrt(ops.sum(x * x) + 1e-12))


def conv_transpose(x, filters, name, kernel=4):
    """Stride-2 transposed convolution (doubles the spatial size); 4x4 by default. On JAX its gradients
    are written as the strided convolution's (transposed_conv.TransposedConv2D)."""
    return TransposedConv2D(
        filters, kernel, strides=2, padding="same", kernel_initializer=init(), name=name
    )(x)


def upsample_conv(x, filters, name, kernel=5):
    """Nearest-neighbour 2x upsampling, then a stride-1 convolution: doubles the spatial size without the
    uneven kernel overlap that gives stride-2 transposed convolutions their checkerboard."""
    x = layers.UpSampling2D(2, interpolation="nearest", name=f"{name}_up")(x)
    return layers.Conv2D(filters, kernel, padding="same", kernel_initializer=init(), name=name)(x)


def batch_norm(x, name):
    """A float32 island: statistics of float16 activations overflow and lose precision.

    The float32 output is cast back to the compute dtype by the next layer. On JAX,
    --jax_batch_norm fused takes the training statistics in one pass (batch_norm.BatchNorm).
    """
    return BatchNorm(momentum=BN_MOMENTUM, epsilon=BN_EPSILON, dtype="float32", name=name)(x)


def leaky_relu(x, name):
    return layers.LeakyReLU(negative_slope=0.2, name=name)(x)


class UnitRange(layers.Layer):
    """(x + 1) / 2: an image in [-1, 1] (a tanh output) as one in [0, 1]. Not keras.layers.Rescaling: that
    is a tf.data preprocessing layer and reaches for TensorFlow on the JAX backend."""

    def call(self, x):
        return 0.5 * x + 0.5


def float32_tanh_to_unit(x, name):
    """A tanh image output mapped to [0, 1] ((tanh + 1) / 2), both in float32: the images' contract."""
    x = layers.Activation("tanh", dtype="float32", name=f"{name}_tanh")(x)
    return UnitRange(dtype="float32", name=name)(x)


class MinibatchStddev(layers.Layer):
    """Appends one channel to [B, H, W, C] features: for each group of `group_size` consecutive images,
    the standard deviation of every feature across the group, averaged into one number that each image
    of the group carries (Karras et al., "Progressive Growing of GANs", ICLR 2018, section 3).

    D scores each image on its own, so a generator that draws one image per class (one colour, one
    angle) costs it nothing; this channel lets D see how much a group varies. The trainer orders each
    batch by class (data/batches.py), so a group mostly holds one class and the channel measures the
    spread within a class; real and fake batches go through D separately. A batch the group size does
    not divide uses the largest group that does (1 gives a spread of 0), an unknown batch size one group.
    A float32 island (the variance of float16 activations loses precision); place it after D's last
    batch norm, if any, which would subtract any value shared by the whole batch.
    """

    def __init__(self, group_size=4, dtype="float32", **kwargs):
        super().__init__(dtype=dtype, **kwargs)
        self.group_size = group_size

    def call(self, x):
        # None (TensorFlow) or a symbolic dimension (JAX) while Keras infers shapes
        batch = x.shape[0]
        if isinstance(batch, int):
            group = math.gcd(batch, self.group_size)
            groups = ops.reshape(x, (batch // group, group) + tuple(x.shape[1:]))
            spread = ops.mean(ops.sqrt(ops.var(groups, axis=1) + 1e-8), axis=(1, 2, 3))
            spread = ops.repeat(spread, group, axis=0)[:, None, None, None]
        else:
            spread = ops.mean(ops.sqrt(ops.var(x, axis=0) + 1e-8))
        return ops.concatenate([x, ops.ones_like(x[..., :1]) * spread], axis=-1)


def class_projection(features, labels, num_classes, name, positions=1):
    """<embed(label), features>, one float32 number per image: the class-conditional term of a
    projection discriminator (Miyato and Koyama, "cGANs with Projection Discriminator", ICLR 2018). The
    embedding and the inner product are a float32 island: a sum over thousands of float16 products can
    overflow, and this number is a logit.

    positions > 1: `features` is a flattened map of that many positions, and the term reads its sum over
    them (the paper's global sum pooling), so one embedding row scores a class wherever it shows."""
    if positions > 1:
        features = SumOverPositions(positions, dtype="float32", name=f"{name}_pooled")(features)
    embedded = layers.Embedding(
        num_classes,
        features.shape[-1],
        embeddings_initializer=init(),
        dtype="float32",
        name=f"{name}_embedding",
    )(labels)
    return layers.Dot(axes=-1, dtype="float32", name=name)([embedded, features])


class SumOverPositions(layers.Layer):
    """[batch, positions * channels] (a flattened map, channels last) -> [batch, channels]: the sum over
    the positions."""

    def __init__(self, positions, **kwargs):
        super().__init__(**kwargs)
        self.positions = positions

    def call(self, features):
        return ops.sum(
            ops.reshape(features, (-1, self.positions, features.shape[-1] // self.positions)),
            axis=1,
        )
