"""Differentiable augmentation of every image D sees (DiffAugment: Zhao, Liu, Lin, Zhu and Han, "Differentiable
Augmentation for Data-Efficient GAN Training", NeurIPS 2020), in backend-neutral Keras ops.

The step applies one random transformation per image to the real and to the fake batch before D's trunk,
in D's pass and in G's and Q's; it is differentiable in the pixels, so G learns through it. D then never
sees an image unaugmented, and G gains nothing by drawing what the augmentation does: its samples are
judged unaugmented. The policy is DiffAugment's for CIFAR-10: colour (brightness, saturation, contrast),
translation by up to 1/8 of the side, and cutout of a square half the side. Images are in [0, 1] here
(DiffAugment's are in [-1, 1]); its constants are converted, and what it fills with (its 0) is mid-grey.

The random draws are a hash of (step, image, salt) in 32-bit integer ops, so TensorFlow and JAX draw the
same numbers without a random state in the step, and the steps of both backends stay equal.
"""

from keras import ops

DRAWS = 7  # per image: brightness, saturation, contrast, shift y, shift x, cutout y, cutout x
POLICY = ("color", "translation", "cutout")  # DiffAugment's for CIFAR-10
REAL, FAKE = 0, 1  # salts: the real and the fake batch of a step draw independently


def augment(images, u, policy=POLICY):
    """images [B, H, W, C] in [0, 1] (any float dtype; float32 out); u [B, DRAWS] uniform in [0, 1)."""
    x = ops.cast(images, "float32")
    if "color" in policy:
        x = _color(x, u[:, 0:3])
    if "translation" in policy:
        x = _translate(x, u[:, 3:5])
    if "cutout" in policy:
        x = _cutout(x, u[:, 5:7])
    return x


def draws(step, batch, salt, offset=0):
    """[batch, DRAWS] float32 uniform in [0, 1): a hash of (step, offset + image index, draw, salt).

    `step` an int scalar tensor (the step counter), `offset` the first image's index in the global batch
    (a replica's share starts further on)."""
    index = (
        ops.reshape(ops.arange(batch, dtype="int32") + ops.cast(offset, "int32"), (-1, 1)) * DRAWS
    )
    counter = index + ops.reshape(ops.arange(DRAWS, dtype="int32"), (1, -1))
    key = _hash(ops.cast(step, "int32") * 2 + salt)
    bits = _hash(_hash(ops.bitwise_xor(counter, key)))
    return ops.cast(_shift_right(bits, 8), "float32") / float(1 << 24)


def _shift_right(x, k):
    """Logical right shift of int32 bit patterns (int32's >> copies the sign bit)."""
    return ops.bitwise_and(ops.right_shift(x, k), (1 << (32 - k)) - 1)


def _hash(x):
    """Chris Wellons' "lowbias32" integer hash, in int32 ops that wrap as uint32 would."""
    x = ops.cast(x, "int32")
    x = ops.bitwise_xor(x, _shift_right(x, 16))
    x = x * 0x7FEB352D
    x = ops.bitwise_xor(x, _shift_right(x, 15))
    x = x * (0x846CA68B - (1 << 32))  # the uint32 constant as an int32 with the same bits
    return ops.bitwise_xor(x, _shift_right(x, 16))


def _per_image(v):
    return ops.reshape(v, (-1, 1, 1, 1))


def _color(x, u):
    x = x + _per_image(u[:, 0] - 0.5) * 0.5  # brightness: +-0.5 in [-1, 1] units
    mean = ops.mean(x, axis=3, keepdims=True)
    x = (x - mean) * _per_image(u[:, 1] * 2.0) + mean  # saturation x [0, 2]
    mean = ops.mean(x, axis=(1, 2, 3), keepdims=True)
    return (x - mean) * _per_image(u[:, 2] + 0.5) + mean  # contrast x [0.5, 1.5]


def _shift_matrix(shift, side):
    """[B, side, side]: row i has a 1 at column i + shift, none where that is outside the image."""
    i = ops.arange(side, dtype="float32")
    target = ops.reshape(i, (1, side, 1)) + ops.reshape(shift, (-1, 1, 1))
    return ops.cast(ops.equal(ops.reshape(i, (1, 1, side)), target), "float32")


def _translate(x, u, ratio=0.125):
    """Each image shifted by whole pixels, up to ratio of its side each way; pixels from outside mid-grey.
    As two 0/1 matrix products (rows, then columns), so the gradient is the shift back."""
    _, height, width, _ = x.shape
    reach_y, reach_x = int(height * ratio), int(width * ratio)
    sy = ops.floor(u[:, 0] * (2 * reach_y + 1)) - reach_y
    sx = ops.floor(u[:, 1] * (2 * reach_x + 1)) - reach_x
    return (
        ops.einsum(
            "bik,bjl,bklc->bijc", _shift_matrix(sy, height), _shift_matrix(sx, width), x - 0.5
        )
        + 0.5
    )


def _cutout(x, u, ratio=0.5):
    """A square of ratio of the side, centred anywhere in the image (clipped at its edges), mid-grey."""
    _, height, width, _ = x.shape
    ch, cw = int(height * ratio), int(width * ratio)
    top = ops.floor(u[:, 0] * (height + 1 - ch % 2)) - ch // 2
    left = ops.floor(u[:, 1] * (width + 1 - cw % 2)) - cw // 2
    ys = ops.reshape(ops.arange(height, dtype="float32"), (1, height, 1))
    xs = ops.reshape(ops.arange(width, dtype="float32"), (1, 1, width))
    top, left = ops.reshape(top, (-1, 1, 1)), ops.reshape(left, (-1, 1, 1))
    cut = ops.logical_and(
        ops.logical_and(ys >= top, ys < top + ch), ops.logical_and(xs >= left, xs < left + cw)
    )
    keep = 1.0 - ops.cast(cut, "float32")[..., None]
    return x * keep + 0.5 * (1.0 - keep)
