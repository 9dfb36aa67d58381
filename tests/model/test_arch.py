"""--arch: the AC-GAN paper's CIFAR-10 preset beside the reference model; shapes, dtypes, float32 islands,
--width, "auto", the config field (saved, resumed, absent in old runs) and one-line errors."""

import dataclasses
import json

import keras
import numpy as np
import pytest

from acgan import presets
from acgan.config import Config
from acgan.errors import UserError
from acgan.model import blocks, networks, paper_cifar
from acgan.training import run_dir as run_dirs
from conftest import POLICIES

SHAPE = (32, 32, 3)


@pytest.mark.parametrize("policy", POLICIES)
def test_paper_preset_shapes_dtypes_and_float32_islands(policy, set_policy):
    set_policy(policy)
    m = networks.build_models(SHAPE, 10, arch="acgan_cifar")
    compute = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}[
        policy
    ]
    z = (
        np.random.default_rng(0)
        .uniform(-1, 1, (4, presets.ACGAN_CIFAR.networks.noise_dim))
        .astype(np.float32)
    )
    images = m.generator([z, np.arange(4, dtype=np.int32)], training=False)
    assert tuple(images.shape) == (4,) + SHAPE and images.dtype == "float32"
    assert 0.0 <= float(np.min(images)) and float(np.max(images)) <= 1.0  # (tanh + 1) / 2
    features = m.trunk(images, training=False)
    # + the minibatch standard deviation channel
    assert tuple(features.shape) == (
        4,
        4 * 4 * (256 + 1),
    )
    labels = np.array([0, 1, 2, 3], np.int32)
    logit, classes = m.d_head([np.asarray(features), labels]), m.q_head(features)
    assert tuple(logit.shape) == (4, 1) and tuple(classes.shape) == (4, 10)
    assert logit.dtype == "float32" and classes.dtype == "float32"
    layers = {l.name: l for part in m for l in part.layers}
    for name, layer in layers.items():
        if isinstance(layer, keras.layers.BatchNormalization) or name in (
            "g_image",
            "g_image_tanh",
            "d_logit",
            "q_logits",
            "d_minibatch_stddev",
            "d_projection",
            "d_projection_embedding",
            "d_projection_pooled",
            "d_logit_projected",
        ):
            assert layer.compute_dtype == "float32", name
        elif isinstance(
            layer, (keras.layers.Conv2D, keras.layers.Conv2DTranspose, keras.layers.Dense)
        ):
            assert layer.compute_dtype == compute and layer.variable_dtype == "float32", name
    # The table: G 384 (4x4) -> 192 -> 96 -> 3 by 5x5 kernels, each doubling the side (here a nearest
    # upsampling and a stride-1 3x3 convolution: the measured departures); D 3x3 convolutions alternating
    # stride 2 and 1, batch norm from the second (dropout: off, the other departure; here spectrally
    # normalised convolutions and no batch norm in D, a fourth; and maps 64, 64, 128, 128, 256, 256 for the
    # table's 16, 32, 64, 128, 256, 512, a fifth).
    assert layers["g_fc1"].units == 4 * 4 * 384
    assert [layers[n].filters for n in ("g_deconv1", "g_deconv2", "g_deconv_out")] == [192, 96, 3]
    # departure
    assert {layers[n].kernel_size for n in ("g_deconv1", "g_deconv2", "g_deconv_out")} == {(3, 3)}
    assert all(
        isinstance(layers[f"{n}_up"], keras.layers.UpSampling2D) for n in ("g_deconv1", "g_deconv2")
    )
    assert [layers[f"d_conv{i}"].filters for i in range(1, 7)] == [64, 64, 128, 128, 256, 256]
    assert [layers[f"d_conv{i}"].strides for i in range(1, 7)] == [(2, 2), (1, 1)] * 3
    assert all(isinstance(layers[f"d_conv{i}"], blocks.SpectralConv2D) for i in range(1, 7))
    assert not any(isinstance(l, keras.layers.BatchNormalization) for l in m.trunk.layers)
    assert all(layers[f"d_conv{i}"].sn_u.dtype == "float32" for i in range(1, 7))
    assert presets.ACGAN_CIFAR.networks.dropout == 0.0
    assert not any(isinstance(l, keras.layers.Dropout) for l in layers.values())
    # The third departure: the minibatch spread after D's last convolution, before the heads.
    assert [l.name for l in m.trunk.layers[-3:]] == ["d_lrelu6", "d_minibatch_stddev", "d_flatten"]


@pytest.mark.parametrize("policy", POLICIES)
def test_the_minibatch_stddev_channel_is_each_groups_spread_in_float32(policy, set_policy):
    set_policy(policy)
    inputs = keras.Input((2, 2, 3))
    model = keras.Model(inputs, blocks.MinibatchStddev(group_size=4, name="spread")(inputs))
    x = np.random.default_rng(0).normal(0, 1, (8, 2, 2, 3)).astype(np.float32)
    out = np.asarray(model(x))
    assert out.shape == (8, 2, 2, 4) and out.dtype == np.float32
    compute = np.asarray(
        keras.ops.cast(keras.ops.cast(x, model.layers[-1].compute_dtype), "float32")
    )
    np.testing.assert_array_equal(out[..., :3], compute)  # the features pass through

    def spread(group):  # each feature's std over the group, averaged
        return np.sqrt(group.var(axis=0) + 1e-8).mean()

    for rows in (slice(0, 4), slice(4, 8)):  # two groups of 4 consecutive images
        np.testing.assert_allclose(out[rows, ..., 3], spread(compute[rows]), rtol=1e-5)
    # A group drawn as one image has no spread, whatever the other group does: what D can now see.
    collapsed = np.concatenate([np.repeat(x[:1], 4, axis=0), x[4:]])
    out = np.asarray(model(collapsed))
    np.testing.assert_allclose(out[:4, ..., 3], 1e-4, rtol=1e-3)
    assert out[4:, ..., 3].min() > 0.5
    # 6 images: groups of 2 (the largest size that divides both); 5: groups of 1, no spread to see.
    np.testing.assert_allclose(
        np.asarray(model(x[:6]))[2:4, ..., 3], spread(compute[2:4]), rtol=1e-5
    )
    np.testing.assert_allclose(np.asarray(model(x[:5]))[..., 3], 1e-4, rtol=1e-3)


@pytest.mark.parametrize("policy", POLICIES)
def test_the_paper_presets_d_head_adds_the_class_projection_in_float32(policy, set_policy):
    """acgan_cifar's D head: logit = dense(features) + <embedding[label], features summed over the map's
    positions>, all in float32 (the projection discriminator with its global sum pooling); the
    reference model's D head takes no labels."""
    set_policy(policy)
    # a flattened map of 2 positions x 3 channels
    head = paper_cifar.build_d_head(6, 3, positions=2)
    rng = np.random.default_rng(0)
    features = rng.normal(0, 1, (4, 6)).astype(np.float32)
    labels = np.array([0, 1, 2, 1], np.int32)
    dense, embedding = head.get_layer("d_logit"), head.get_layer("d_projection_embedding")
    assert tuple(embedding.embeddings.shape) == (3, 3)
    embedding.embeddings.assign(rng.normal(0, 1, (3, 3)).astype(np.float32))
    kernel, bias = (np.asarray(v) for v in dense.weights)
    pooled = features[:, :3] + features[:, 3:]
    expected = (
        features @ kernel
        + bias
        + np.sum(np.asarray(embedding.embeddings)[labels] * pooled, axis=1, keepdims=True)
    )
    logit = head([features, labels])
    assert logit.dtype == "float32" and embedding.compute_dtype == "float32"
    np.testing.assert_allclose(np.asarray(logit), expected, rtol=1e-5, atol=1e-5)
    other = np.asarray(head([features, (labels + 1) % 3]))
    assert np.all(np.abs(other - expected) > 1e-4)  # the label moves the logit
    # The reference model's head takes the features alone (its checkpoints' layer numbering unchanged).
    reference = networks.build_d_head(6)
    assert (
        len(reference.inputs) == 1
        and networks.d_head_inputs(reference, features, labels) is features
    )
    assert networks.d_head_inputs(head, features, labels) == [features, labels]


@pytest.mark.parametrize("policy", POLICIES)
def test_spectral_conv_divides_the_kernel_by_its_largest_singular_value(policy, set_policy):
    """SpectralConv2D: after some training calls (power iteration) the layer computes the convolution
    with kernel / sigma_max in the policy's compute dtype, leaves its trainable kernel as it was (unlike
    keras.layers.SpectralNormalization, which overwrites it), moves u only in training, and lets the
    gradient see sigma (the paper's reparametrisation)."""
    set_policy(policy)
    inputs = keras.Input((6, 6, 3))
    layer = blocks.SpectralConv2D(8, 3, strides=1, padding="same", name="sn")
    model = keras.Model(inputs, layer(inputs))
    rng = np.random.default_rng(0)
    # A kernel with a known spectrum (3, 1, 0.5, ...): the power iteration converges fast.
    u, _ = np.linalg.qr(rng.normal(size=(27, 8)))
    v, _ = np.linalg.qr(rng.normal(size=(8, 8)))
    kernel = (u * np.array([3.0, 1.0, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05])) @ v.T
    layer.kernel.assign(kernel.reshape(3, 3, 3, 8).astype(np.float32))
    layer.bias.assign(np.linspace(-1, 1, 8).astype(np.float32))
    x = rng.normal(size=(2, 6, 6, 3)).astype(np.float32)
    for _ in range(20):
        model(x, training=True)
    u_trained = layer.sn_u.numpy().copy()
    out = model(x, training=False)
    np.testing.assert_array_equal(layer.sn_u.numpy(), u_trained)  # inference leaves u alone
    # not overwritten
    np.testing.assert_allclose(layer.kernel.numpy().reshape(27, 8), kernel, rtol=1e-6, atol=1e-7)
    compute = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}[
        policy
    ]
    assert out.dtype == compute and layer.sn_u.dtype == "float32"
    expected = (
        np.asarray(
            keras.ops.conv(x, (kernel / 3.0).reshape(3, 3, 3, 8).astype(np.float32), padding="same")
        )
        + layer.bias.numpy()
    )
    tolerance = {"float32": 1e-4, "mixed_float16": 5e-3, "mixed_bfloat16": 3e-2}[policy]
    np.testing.assert_allclose(
        np.asarray(out, np.float32), expected, atol=tolerance * np.abs(expected).max()
    )
    if policy == "float32":  # scaling the kernel changes nothing downstream: sigma scales with it
        layer.kernel.assign(layer.kernel.numpy() * 5.0)
        np.testing.assert_allclose(
            np.asarray(model(x, training=False)), np.asarray(out), rtol=1e-4, atol=1e-5
        )


def test_each_preset_trains_with_its_own_learning_rates(set_policy):
    from acgan.step.factory import build_step
    from acgan.step.tf_step import TensorFlowStep

    reference, cifar = presets.PRESETS["reference"], presets.PRESETS["acgan_cifar"]
    assert reference.learning_rates == (2e-4, 1e-3, 1e-3)  # the seed's, unchanged
    # the paper's
    assert cifar.learning_rates == presets.ACGAN_CIFAR.learning_rates == (2e-4, 2e-4, 2e-4)
    assert reference.q_learns_from_fakes and not cifar.q_learns_from_fakes
    assert reference.g_learns_from_q and not cifar.g_learns_from_q
    assert reference.beta_1 == 0.5 and cifar.beta_1 == 0.0
    set_policy("mixed_float16")
    m = networks.build_models(SHAPE, 10, width=0.25, arch="acgan_cifar")
    trainer = build_step(cifar, "tensorflow", m, 10, jit=False)  # as training builds it
    assert not trainer.preset.q_learns_from_fakes and not trainer.g_learns_from_q
    assert len(trainer.q_variables) == len(m.trunk.trainable_variables) + len(
        m.q_head.trainable_variables
    )
    optimizers = (trainer.d_optimizer, trainer.g_optimizer, trainer.q_optimizer)
    rates = [float(o.learning_rate) for o in optimizers]
    np.testing.assert_allclose(rates, presets.ACGAN_CIFAR.learning_rates)
    assert [o.inner_optimizer.beta_1 for o in optimizers] == [
        0.0
    ] * 3  # inside the loss-scale wrappers
    default = TensorFlowStep(m, 10, jit=False)
    np.testing.assert_allclose([float(default.g_optimizer.learning_rate)], [1e-3])


def test_the_tables_transposed_convolutions_batch_norm_and_dropout_still_build():
    table = dataclasses.replace(
        presets.ACGAN_CIFAR.networks, upsample="transpose", dropout=0.5, spectral_norm=False
    )
    m = networks.build_models(
        SHAPE, 10, arch=dataclasses.replace(presets.ACGAN_CIFAR, networks=table)
    )
    layers = {l.name: l for part in m for l in part.layers}
    assert isinstance(layers["g_deconv1"], keras.layers.Conv2DTranspose) and layers[
        "g_deconv1"
    ].strides == (2, 2)
    assert all(layers[f"d_dropout{i}"].rate == 0.5 for i in range(1, 7))
    assert "d_bn1" not in layers and all(f"d_bn{i}" in layers for i in range(2, 7))
    assert not any(isinstance(layers[f"d_conv{i}"], blocks.SpectralConv2D) for i in range(1, 7))
    images = m.generator([np.zeros((2, table.noise_dim), np.float32), np.array([0, 1], np.int32)])
    assert tuple(images.shape) == (2,) + SHAPE


def test_width_scales_the_preset_in_multiples_of_eight():
    m = networks.build_models(SHAPE, 10, width=0.5, arch="acgan_cifar")
    layers = {l.name: l for part in m for l in part.layers}
    assert layers["g_fc1"].units == 16 * 192 and layers["g_deconv1"].filters == 96
    assert [layers[f"d_conv{i}"].filters for i in range(1, 7)] == [32, 32, 64, 64, 128, 128]
    assert m.trunk.output.shape[-1] == 16 * (128 + 1)
    full = networks.build_models(SHAPE, 10, arch="acgan_cifar")
    assert sum(p.count_params() for p in m) < sum(p.count_params() for p in full) / 3


def test_auto_picks_the_preset_for_32x32x3_only_and_the_preset_needs_a_side_divisible_by_8():
    assert presets.named("auto", (32, 32, 3)).name == "acgan_cifar"
    assert presets.named("auto", (28, 28, 1)).name == "reference"
    assert presets.named("auto", (32, 32, 1)).name == "reference"
    assert presets.named("reference", (32, 32, 3)).name == "reference"
    assert presets.named("acgan_cifar", (64, 64, 3)).name == "acgan_cifar"
    with pytest.raises(UserError, match="divides by 8"):
        presets.named("acgan_cifar", (28, 28, 1))
    with pytest.raises(UserError, match="unknown arch 'dcgan'"):
        presets.named("dcgan", (32, 32, 3))
    resolved = presets.resolve(Config(arch="auto", loss="hinge", ema_decay=0.5), (32, 32, 3))
    assert (resolved.name, resolved.loss, resolved.ema_decay) == ("acgan_cifar", "hinge", 0.5)
    assert (
        networks.build_models((28, 28, 1), 10, arch="auto").generator.input[0].shape[-1]
        == networks.NOISE_DIM
    )


def test_config_round_trips_the_arch_and_a_config_from_another_version_is_one_line(tmp_path):
    config = Config(dataset="swatches", arch="acgan_cifar").validate()
    assert Config.from_json(config.to_json()).arch == "acgan_cifar"
    assert Config().arch == "auto"
    old = json.loads(Config().to_json())
    del old["arch"]
    old["width_multiplier"] = 1.0
    with pytest.raises(
        UserError,
        match=r"^x.json was written by another version of acgan \(no arch; "
        r"unknown width_multiplier\): this version cannot read it$",
    ):
        Config.from_json(json.dumps(old), "x.json")
    with pytest.raises(UserError, match="unknown arch 'big'"):
        Config(arch="big").validate()
    # A resumed run keeps its preset: another one is refused like another width.
    saved = dataclasses.replace(config, output_dir=str(tmp_path))
    with pytest.raises(UserError, match="--arch 'acgan_cifar' -> 'reference'"):
        run_dirs.check_resumable(dataclasses.replace(saved, arch="reference"), saved, tmp_path)
