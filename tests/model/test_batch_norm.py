"""BatchNorm: keras.layers.BatchNormalization, with --jax_batch_norm fused a one-pass training call on JAX
(a jax.custom_vjp) that computes what Keras computes: outputs, moving statistics and gradients equal
Keras's to float64 rounding, and to float32 rounding from float16 inputs; inference, the default mode and
TensorFlow are Keras's call itself; a JAX training step gives the same losses; exports hold Keras's layer.

The float64 JAX checks run in a child process (float64 on JAX is a process-wide setting); the fused
JAX training step is tested in tests/jax/test_jax_model.py."""

import textwrap

import keras
import numpy as np
import pytest

from acgan.config import Config
from acgan.errors import UserError
from acgan.model import jax_formulations
from acgan.model.batch_norm import BatchNorm
from acgan.training.export import portable_layer
from api_runs import float64_jax_script

# Keras on JAX computes every float64 op in float32 (keras.backend.result_type maps float64 to float32 on
# any backend but TensorFlow, JAX_ENABLE_X64 or not), so a float64 BatchNormalization is only float32
# accurate there; the script lifts that ceiling, so Keras's own call is a float64 reference.
NUMERICS = textwrap.dedent("""
    import json, os
    import jax, jax.numpy as jnp, numpy as np, keras
    from keras.src.backend.common import dtypes
    dtypes.BIT64_TO_BIT32_DTYPE["float64"] = "float64"
    from acgan.config import Config
    from acgan.model import jax_formulations
    from acgan.model.batch_norm import BatchNorm, fused_batch_norm

    rel = lambda a, b: float(np.linalg.norm(np.asarray(a, np.float64) - np.asarray(b, np.float64))
                             / np.linalg.norm(np.asarray(b, np.float64)))

    def run(layer, weights, x, w, mode, training=True):
        # y, new moving statistics, and the gradients of sum(y * w) w.r.t. (trainable weights, x)
        def loss(trainable, x):
            jax_formulations.use(Config(jax_batch_norm=mode))  # read when the layer is traced
            y, moving = layer.stateless_call(trainable, weights[1], x, training=training)
            return jnp.sum(y.astype(jnp.float64) * w), (y, moving)
        gradient = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))  # a new trace per call
        (_, (y, moving)), (dweights, dx) = gradient(weights[0], x)
        return y, moving, dweights, dx

    def compare(layer, weights, x, w):
        a, b = run(layer, weights, x, w, "fused"), run(layer, weights, x, w, "keras")
        out = {"y": rel(a[0], b[0]), "dx": rel(a[3], b[3])}
        out.update({f"moving{i}": rel(p, q) for i, (p, q) in enumerate(zip(a[1], b[1]))})
        out.update({f"d{i}": rel(p, q) for i, (p, q) in enumerate(zip(a[2], b[2]))})
        return out, a, b

    def make(shape, dtype, rng, moving_mean=None, **options):
        layer = BatchNorm(momentum=0.9, epsilon=1e-5, dtype=dtype, **options)
        layer.build(shape)
        trainable = [jnp.asarray(1 + 0.5 * rng.randn(*v.shape), dtype) for v in layer.trainable_variables]
        mean = rng.randn(shape[-1]) if moving_mean is None else moving_mean
        weights = (trainable, [jnp.asarray(mean, dtype), jnp.asarray(rng.uniform(0.5, 2, shape[-1]), dtype)])
        return layer, weights

    result = {"float64": [], "float16": []}
    for shape, options in (((3, 5, 5, 7), {}), ((4, 8), {}), ((4, 8), {"center": False, "scale": False})):
        rng = np.random.RandomState(len(shape))
        layer, weights = make(shape, "float64", rng, **options)
        x, w = jnp.asarray(3 + 2 * rng.randn(*shape)), jnp.asarray(rng.randn(*shape))
        result["float64"].append(compare(layer, weights, x, w)[0])

    # The statistics as outputs: a loss of y, mean and variance, against autodiff of jnp.mean / jnp.var.
    rng = np.random.RandomState(1)
    x, gamma, beta, shift = 3 + 2 * rng.randn(6, 3, 5), rng.randn(5), rng.randn(5), rng.randn(5)
    w, u, v = rng.randn(6, 3, 5), rng.randn(5), rng.randn(5)
    def reference(x, gamma, beta, shift):
        mean, variance = jnp.mean(x, (0, 1)), jnp.var(x, (0, 1))
        return (x - mean) * jax.lax.rsqrt(variance + 1e-5) * gamma + beta, mean, variance
    def loss(f, *args):
        y, mean, variance = f(*args)
        return jnp.sum(y * w) + jnp.sum(mean * u) + jnp.sum(variance * v)
    fused = fused_batch_norm(2, 1e-5)
    got = jax.jit(jax.grad(lambda *a: loss(fused, *a), argnums=(0, 1, 2, 3)))(x, gamma, beta, shift)
    want = jax.jit(jax.grad(lambda *a: loss(reference, *a), argnums=(0, 1, 2)))(x, gamma, beta, shift)
    result["statistics"] = {**{k: rel(p, q) for k, p, q in zip(("dx", "dgamma", "dbeta"), got, want)},
                            "dshift": float(jnp.abs(got[3]).max()),
                            "outputs": max(rel(p, q) for p, q in zip(fused(x, gamma, beta, shift),
                                                                     reference(x, gamma, beta, shift)))}

    # float16 activations into a float32 layer (a float32 island under mixed_float16): fused against
    # Keras, and each against the float64 truth; the moving mean far from the batch's (0: the first
    # step) and near it (a settled run).
    for shape in ((64, 7, 7, 32), (64, 128)):
        for settled in (False, True):
            rng = np.random.RandomState(shape[-1])
            x = (3 + 2 * rng.randn(*shape)).astype(np.float16)
            mean = x.astype(np.float64).mean(tuple(range(len(shape) - 1)))
            layer, weights = make(shape, "float32", rng, moving_mean=mean + 0.01 * rng.randn(shape[-1]) if settled
                                  else np.zeros(shape[-1]))
            w = rng.randn(*shape)
            errors, a, b = compare(layer, weights, jnp.asarray(x), jnp.asarray(w))
            x64, gamma, beta = x.astype(np.float64), *(np.asarray(t, np.float64) for t in weights[0])
            axes, n = tuple(range(len(shape) - 1)), x.size // shape[-1]
            inv_std = 1 / np.sqrt(x64.var(axes) + 1e-5)
            xhat = (x64 - x64.mean(axes)) * inv_std
            truth = {"y": xhat * gamma + beta, "d0": (w * xhat).sum(axes), "d1": w.sum(axes),
                     "dx": gamma * inv_std / n * (n * w - w.sum(axes) - xhat * (w * xhat).sum(axes))}
            for name, got in (("fused", a), ("keras", b)):
                values = {"y": got[0], "d0": got[2][0], "d1": got[2][1], "dx": got[3]}
                errors.update({f"{name}_{k}": rel(values[k], truth[k]) for k in truth})
            errors["y_dtype"] = str(a[0].dtype)
            result["float16"].append(errors)

    # Inference in fused mode, and training in keras mode, are keras.layers.BatchNormalization's call.
    rng = np.random.RandomState(3)
    layer, weights = make((8, 4, 4, 6), "float32", rng)
    plain = keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-5, dtype="float32")
    plain.build((8, 4, 4, 6))
    x, w = jnp.asarray(rng.randn(8, 4, 4, 6), jnp.float16), jnp.asarray(rng.randn(8, 4, 4, 6))
    same = lambda a, b: all(bool(jnp.array_equal(p, q)) for p, q in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
    keras_call = lambda training: run(plain, weights, x, w, "fused", training)
    result["inference_is_keras"] = same(run(layer, weights, x, w, "fused", False), keras_call(False))
    result["keras_mode_is_keras"] = same(run(layer, weights, x, w, "keras", True), keras_call(True))
    print(json.dumps(result))
""")


@pytest.fixture(scope="module")
def numerics():
    return float64_jax_script(NUMERICS)


@pytest.mark.slow
def test_fused_equals_keras_in_float64(numerics):
    for case in numerics["float64"]:  # outputs, moving mean and variance, d/dgamma, d/dbeta, d/dx
        assert max(case.values()) < 1e-10, case  # measured: 2e-15 at most


def test_the_batch_statistics_are_differentiable_outputs(numerics):
    case = numerics["statistics"]
    assert case["dshift"] == 0.0 and max(case.values()) < 1e-10, case


def test_fused_from_float16_agrees_with_keras_to_float32_rounding(numerics):
    # From the same float16 input both compute in float32, the same sums in another order, and fused's
    # variance as E[(x-k)^2] - E[x-k]^2: with k = 0 (the first step), mean 3 and standard deviation 2 that
    # subtraction loses log2(13/4) ~ 2 bits (measured: y 1.2e-7 from the float64 truth, Keras's 7.9e-8);
    # with k near the mean, nothing (6.6e-8 against 8.2e-8). So y, the moving statistics, dgamma and dbeta
    # differ from Keras's by a few float32 ulps (measured 2.9e-7 at most; bound 1e-6 ~ 16 ulps), and
    # neither is further from the truth than twice Keras plus 1e-7. dx is the cotangent of a float16
    # input, so float16 (both 2.1e-4 from the truth): a few ulps of float32 flip the rounding of a few
    # elements (measured 6.7e-6; bound 5e-5, a tenth of a float16 ulp).
    for case in numerics["float16"]:
        assert case.pop("y_dtype") == "float32"
        assert max(case[k] for k in ("y", "moving0", "moving1", "d0", "d1")) < 1e-6, case
        assert case["dx"] < 5e-5, case
        for k in ("y", "d0", "d1", "dx"):
            assert case[f"fused_{k}"] <= 2 * case[f"keras_{k}"] + 1e-7, (k, case)


def test_inference_and_the_default_mode_are_keras_call(numerics):
    assert numerics["inference_is_keras"] and numerics["keras_mode_is_keras"]


def test_an_unknown_mode_is_one_line():
    with pytest.raises(UserError) as error:
        Config(jax_batch_norm="fast").validate()
    assert str(error.value) == "--jax_batch_norm 'fast': choose one of keras, fused"


def test_tensorflow_runs_keras_call_in_either_mode(monkeypatch):
    layer = BatchNorm(momentum=0.9, epsilon=1e-5, dtype="float32")
    plain = keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-5, dtype="float32")
    x = np.random.default_rng(0).normal(3, 2, (8, 4, 4, 6)).astype(np.float16)
    layer.build(x.shape), plain.build(x.shape)
    monkeypatch.setattr(jax_formulations, "batch_norm", lambda: "fused")
    np.testing.assert_array_equal(layer(x, training=True), plain(x, training=True))
    np.testing.assert_array_equal(layer.moving_variance.numpy(), plain.moving_variance.numpy())


def test_batch_norm_serialises_and_exports_as_keras_layer():
    layer = BatchNorm(momentum=0.9, epsilon=1e-5, dtype="float32", name="g_bn1")
    assert isinstance(layer, keras.layers.BatchNormalization)
    assert keras.saving.get_registered_name(BatchNorm) == "acgan>BatchNorm"
    assert (
        type(keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer)))
        is BatchNorm
    )
    portable = portable_layer(layer)
    assert type(portable) is keras.layers.BatchNormalization
    assert portable.get_config() == layer.get_config()
    layer.build((2, 5)), portable.build((2, 5))
    assert [v.path for v in portable.weights] == [v.path for v in layer.weights]


def test_a_runs_formulations_are_its_config_and_reach_the_layers():
    """The layers trace what the run's Config names (jax_formulations.use, called by the loop, the
    benchmark worker and sampling), and config.json keeps it."""
    config = Config(jax_conv_transpose="linear_transpose", jax_batch_norm="fused").validate()
    assert Config.from_json(config.to_json(), "c") == config
    try:
        jax_formulations.use(config)
        assert (jax_formulations.conv_transpose(), jax_formulations.batch_norm()) == (
            "linear_transpose",
            "fused",
        )
    finally:
        jax_formulations.use(Config())
    assert (jax_formulations.conv_transpose(), jax_formulations.batch_norm()) == (
        "adjoint",
        "keras",
    )
