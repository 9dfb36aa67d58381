"""The AC-GAN's four parts (generator G, discriminator trunk, adversarial head D, class head Q) for a model
preset (acgan.presets, `--arch`), built by the preset's `networks.architecture`:

- `reference` (ReferenceNetworks): the original experiment's design, here
  (docs/presets.md#the-reference-model); for 28x28 the generator starts from 7x7, for 32x32 from 8x8.
  Any square image whose side divides by 4 (two stride-2 layers each way).
- `paper_cifar` (PaperCifarNetworks, the `acgan_cifar` preset): the AC-GAN paper's CIFAR-10 networks
  (acgan/model/paper_cifar.py, docs/presets.md#acgan_cifar): sides that divide by 8 (three stride-2
  layers each way).

`auto` (the command lines' default) picks `acgan_cifar` for 32x32x3 images and `reference` otherwise.
"""

from typing import NamedTuple

import keras
from keras import layers

from acgan import presets
from acgan.model import blocks, paper_cifar

NOISE_DIM = presets.REFERENCE.networks.noise_dim  # the reference model's G noise size


class ACGANModels(NamedTuple):
    # (z [B, noise], labels [B] int) -> images [B, H, W, C] float32 in [0, 1]
    generator: keras.Model
    trunk: keras.Model  # images [B, H, W, C] in [0, 1] -> features [B, F] (reference: 1024*width)
    # features (acgan_cifar: [features, labels [B] int]) -> real/fake logit [B, 1] float32
    d_head: keras.Model
    q_head: keras.Model  # features -> class logits [B, K] float32


def build_generator(image_shape, num_classes, width=1.0, noise_dim=NOISE_DIM):
    side, _, depth = image_shape
    base = side // 4
    c64, c128, c1024 = (blocks.channels(n, width) for n in (64, 128, 1024))
    z = keras.Input((noise_dim,), name="z")
    labels = keras.Input((), dtype="int32", name="labels")
    x = layers.Concatenate(name="z_label")([z, keras.ops.one_hot(labels, num_classes)])
    x = layers.ReLU(name="g_relu1")(blocks.batch_norm(blocks.dense(x, c1024, "g_fc1"), "g_bn1"))
    x = blocks.dense(x, base * base * c128, "g_fc2")
    x = layers.ReLU(name="g_relu2")(blocks.batch_norm(x, "g_bn2"))
    x = layers.Reshape((base, base, c128), name="g_reshape")(x)
    x = blocks.conv_transpose(x, c64, "g_deconv1")
    x = layers.ReLU(name="g_relu3")(blocks.batch_norm(x, "g_bn3"))
    x = blocks.conv_transpose(x, depth, "g_deconv2")
    # a model output in float32, so the sigmoid saturates in full precision
    images = layers.Activation("sigmoid", dtype="float32", name="g_image")(x)
    return keras.Model([z, labels], images, name="generator")


def build_trunk(image_shape, width=1.0):
    c64, c128, c1024 = (blocks.channels(n, width) for n in (64, 128, 1024))
    images = keras.Input(image_shape, name="images")
    x = blocks.leaky_relu(blocks.conv(images, c64, "d_conv1"), "d_lrelu1")
    x = blocks.conv(x, c128, "d_conv2")
    x = blocks.leaky_relu(blocks.batch_norm(x, "d_bn2"), "d_lrelu2")
    x = layers.Flatten(name="d_flatten")(x)
    x = blocks.dense(x, c1024, "d_fc3")
    features = blocks.leaky_relu(blocks.batch_norm(x, "d_bn3"), "d_lrelu3")
    return keras.Model(images, features, name="trunk")


def build_d_head(feature_dim):
    """The reference model's D head: one float32 logit from the features alone (the classes are Q's)."""
    features = keras.Input((feature_dim,), name="features")
    return keras.Model(
        features, blocks.dense(features, 1, "d_logit", dtype="float32"), name="d_head"
    )


def d_head_inputs(d_head, features, labels):
    """What `d_head` is called on: the features, and the images' labels too when it is class-conditional
    (acgan_cifar's projection head takes [features, labels]). The reference model's head keeps its one
    input, so its checkpoints from before the projection head still restore (a Keras model's
    checkpoint keys number its layers, and a second input layer would shift them)."""
    return [features, labels] if takes_labels(d_head) else features


def takes_labels(d_head):
    """Whether D's head is class-conditional (acgan_cifar's projection head: inputs [features, labels])."""
    return len(d_head.inputs) == 2


def build_q_head(feature_dim, num_classes, width=1.0):
    features = keras.Input((feature_dim,), name="features")
    x = blocks.dense(features, blocks.channels(128, width), "q_fc1")
    x = blocks.leaky_relu(blocks.batch_norm(x, "q_bn1"), "q_lrelu1")
    return keras.Model(
        features, blocks.dense(x, num_classes, "q_logits", dtype="float32"), name="q_head"
    )


def build_models(image_shape, num_classes, width=1.0, noise_dim=None, arch="reference"):
    """All four parts of a preset under the current global dtype policy. `arch`: a preset's name,
    "auto", or an acgan.presets.Preset.

    noise_dim: G's noise size (default: the preset's, 62 for reference and 100 for acgan_cifar).
    """
    image_shape = tuple(image_shape)
    if isinstance(arch, presets.Preset):
        preset = arch
        presets.check_image_shape(image_shape, preset)
    else:
        preset = presets.named(arch, image_shape)
    knobs = preset.networks
    noise_dim = noise_dim or knobs.noise_dim
    if knobs.architecture == "paper_cifar":
        trunk = paper_cifar.build_trunk(image_shape, knobs, width)
        feature_dim = trunk.output.shape[-1]
        return ACGANModels(
            generator=paper_cifar.build_generator(
                image_shape, num_classes, knobs, width, noise_dim
            ),
            trunk=trunk,
            d_head=paper_cifar.build_d_head(
                feature_dim, num_classes, paper_cifar.map_positions(trunk), knobs.projection
            ),
            q_head=paper_cifar.build_q_head(feature_dim, num_classes),
        )
    trunk = build_trunk(image_shape, width)
    feature_dim = trunk.output.shape[-1]
    return ACGANModels(
        generator=build_generator(image_shape, num_classes, width, noise_dim),
        trunk=trunk,
        d_head=build_d_head(feature_dim),
        q_head=build_q_head(feature_dim, num_classes, width),
    )


def build_classifier(models):
    """Q as a classifier: images -> class probabilities, softmax as a float32 island."""
    images = keras.Input(models.trunk.input.shape[1:], name="images")
    logits = models.q_head(models.trunk(images))
    return keras.Model(
        images, layers.Activation("softmax", dtype="float32", name="q_probs")(logits), name="q"
    )
