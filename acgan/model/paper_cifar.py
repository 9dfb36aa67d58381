"""The AC-GAN paper's CIFAR-10 networks (`--arch acgan_cifar`), from the same policy-aware blocks.

Odena, Olah and Shlens, "Conditional Image Synthesis with Auxiliary Classifier GANs", ICML 2017
(arXiv:1610.09585), Appendix A, the CIFAR-10 table:

    G: z (100) + one-hot class (10) = 110 inputs
       Linear 384 (x 4 x 4), no BN, ReLU
       Transposed conv 5x5, stride 2, 192 maps, BN, ReLU          4x4 -> 8x8
       Transposed conv 5x5, stride 2,  96 maps, BN, ReLU          8x8 -> 16x16
       Transposed conv 5x5, stride 2,   3 maps, no BN, tanh       16x16 -> 32x32
    D: Conv 3x3 stride 2,  16 maps, no BN, dropout 0.5, leaky ReLU 0.2
       Conv 3x3 stride 1,  32 maps, BN,    dropout 0.5, leaky ReLU
       Conv 3x3 stride 2,  64 maps, BN,    dropout 0.5, leaky ReLU
       Conv 3x3 stride 1, 128 maps, BN,    dropout 0.5, leaky ReLU
       Conv 3x3 stride 2, 256 maps, BN,    dropout 0.5, leaky ReLU
       Conv 3x3 stride 1, 512 maps, BN,    dropout 0.5, leaky ReLU
       Linear 11: one sigmoid unit (real/fake) and a softmax over the 10 classes
    Init normal(0, 0.02), biases 0; Adam 2e-4, beta1 0.5; batch 100; leaky ReLU slope 0.2.

Where this departs from the table (each figure that decided it: the linked section of docs/presets.md;
each switch a field of acgan.presets.PaperCifarNetworks, the acgan_cifar preset's `networks`):
- G's tanh mapped to [0, 1] in float32, the step's image range: docs/presets.md#image-range
- the 11 outputs as a 1-logit D head and a K-logit Q head on the trunk: docs/presets.md#two-heads
- 2x nearest-neighbour upsampling + a convolution in G (upsample): docs/presets.md#upsampling
- 3x3 kernels in G (g_kernel): docs/presets.md#generator-kernels
- no dropout in D (dropout): docs/presets.md#dropout
- spectrally normalised convolutions, no batch norm in D (spectral_norm): docs/presets.md#spectral-norm
- D's maps 64, 64, 128, 128, 256, 256 (d_maps): docs/presets.md#discriminator-maps
- a minibatch-spread channel after D's last layer (minibatch_stddev): docs/presets.md#minibatch-standard-deviation
- a projection class term in D's logit (projection): docs/presets.md#projection-discriminator
- that term reads D's last map summed over its positions: docs/presets.md#pooled-class-term
- no activation noise in D: docs/presets.md#activation-noise
- width scales every channel; any side divisible by 8; the batch is --batch: docs/presets.md#width-side-and-batch
- learning rates, Adam's beta_1, their decay, what Q and G learn from, D's augmentation and the loss are
  the preset's other fields (acgan.presets.Preset), which link each.
"""

import keras
from keras import layers

from acgan.model import blocks


def build_generator(image_shape, num_classes, knobs, width=1.0, noise_dim=None):
    """G for `knobs` (a PaperCifarNetworks); noise_dim: its noise size (None: the knobs')."""
    side, _, depth = image_shape
    base = side // 8
    c384, c192, c96 = (blocks.channels(n, width) for n in knobs.g_maps)
    z = keras.Input((noise_dim or knobs.noise_dim,), name="z")
    labels = keras.Input((), dtype="int32", name="labels")
    x = layers.Concatenate(name="z_label")([z, keras.ops.one_hot(labels, num_classes)])
    x = layers.ReLU(name="g_relu1")(blocks.dense(x, base * base * c384, "g_fc1"))
    x = layers.Reshape((base, base, c384), name="g_reshape")(x)
    up = blocks.upsample_conv if knobs.upsample == "resize" else blocks.conv_transpose
    for i, maps in enumerate((c192, c96), start=2):
        x = up(x, maps, f"g_deconv{i - 1}", kernel=knobs.g_kernel)
        x = layers.ReLU(name=f"g_relu{i}")(blocks.batch_norm(x, f"g_bn{i}"))
    x = up(x, depth, "g_deconv_out", kernel=knobs.g_kernel)
    images = blocks.float32_tanh_to_unit(x, "g_image")
    return keras.Model([z, labels], images, name="generator")


def build_trunk(image_shape, knobs, width=1.0):
    """D's trunk for `knobs` (a PaperCifarNetworks): images -> flattened features."""
    images = keras.Input(image_shape, name="images")
    x = images
    for i, maps in enumerate(knobs.d_maps, start=1):
        x = blocks.conv(
            x,
            blocks.channels(maps, width),
            f"d_conv{i}",
            kernel=knobs.d_kernel,
            strides=2 if i % 2 else 1,
            spectral_norm=knobs.spectral_norm,
        )
        if i > 1 and not knobs.spectral_norm:
            x = blocks.batch_norm(x, f"d_bn{i}")
        x = blocks.leaky_relu(x, f"d_lrelu{i}")
        if knobs.dropout:
            x = layers.Dropout(knobs.dropout, name=f"d_dropout{i}")(x)
    if knobs.minibatch_stddev:
        x = blocks.MinibatchStddev(name="d_minibatch_stddev")(x)
    features = layers.Flatten(name="d_flatten")(x)
    return keras.Model(images, features, name="trunk")


def map_positions(trunk):
    """How many positions the trunk's flattened features come from (4 x 4 for 32x32 images)."""
    _, height, width, _ = trunk.get_layer("d_flatten").input.shape
    return height * width


def build_d_head(feature_dim, num_classes, positions=1, projection=True):
    """D's real/fake logit from the trunk's features (a flattened map of `positions` positions) and the
    images' labels (real labels for real images, the labels G was asked for on fakes): a float32 dense
    logit, plus with `projection` (PaperCifarNetworks.projection) the class term <embed(label), features
    summed over the positions> (blocks.class_projection)."""
    features = keras.Input((feature_dim,), name="features")
    labels = keras.Input((), dtype="int32", name="labels")
    logit = blocks.dense(features, 1, "d_logit", dtype="float32")
    if projection:
        logit = layers.Add(dtype="float32", name="d_logit_projected")(
            [
                logit,
                blocks.class_projection(features, labels, num_classes, "d_projection", positions),
            ]
        )
    return keras.Model([features, labels], logit, name="d_head")


def build_q_head(feature_dim, num_classes):
    features = keras.Input((feature_dim,), name="features")
    return keras.Model(
        features, blocks.dense(features, num_classes, "q_logits", dtype="float32"), name="q_head"
    )
