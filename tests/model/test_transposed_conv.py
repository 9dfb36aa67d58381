"""TransposedConv2D on JAX: each formulation's forward equals Keras's and its gradients equal autodiff's
(--jax_conv_transpose autodiff) on random inputs; linear_transpose's forward has the HLO shape XLA's
GPU compiler maps to cuDNN's backward-input convolution."""

import textwrap

import pytest

from acgan.config import Config
from acgan.errors import UserError
from api_runs import float64_jax_script

SCRIPT = textwrap.dedent("""
    import json, os, re
    import jax, jax.numpy as jnp, numpy as np
    from acgan.config import Config
    from acgan.model import jax_formulations
    from acgan.model.transposed_conv import TransposedConv2D

    def run(layer, weights, x, formulation):
        jax_formulations.use(Config(jax_conv_transpose=formulation))  # read when the layer is traced
        return layer.stateless_call(weights, [], x)[0]

    out = {"cases": [], "hlo": {}}
    for side, inputs, filters, padding in ((7, 16, 8, "same"), (14, 8, 1, "same"), (4, 5, 3, "valid")):
        layer = TransposedConv2D(filters, 4, strides=2, padding=padding, dtype="float64")
        rng = np.random.RandomState(side)
        x = rng.randn(3, side, side, inputs)
        layer.build(x.shape)
        weights = [jnp.asarray(rng.randn(*v.shape)) for v in layer.trainable_variables]
        dy = rng.randn(*run(layer, weights, x, "autodiff").shape)

        def loss(weights, x, formulation):
            y = run(layer, weights, x, formulation)
            return jnp.sum(y * dy), y

        grad = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)
        (_, y_b), g_b = grad(weights, x, "autodiff")
        rel = lambda a, b: float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b))
        for formulation in ("adjoint", "linear_transpose"):
            (_, y_a), g_a = grad(weights, x, formulation)
            out["cases"].append({"formulation": formulation, "side": side, "y": rel(y_a, y_b),
                                 "dx": rel(g_a[1], g_b[1]), "dkernel": rel(g_a[0][0], g_b[0][0]),
                                 "dbias": rel(g_a[0][1], g_b[0][1])})
        if side == 14:   # G's last layer's shape: what does its forward's convolution take as the kernel?
            for formulation in ("adjoint", "linear_transpose"):
                hlo = jax.jit(lambda w, x: run(layer, w, x, formulation)).lower(weights, x)
                text = hlo.compiler_ir("hlo").as_hlo_text()
                kernel = re.search(r"= \\S+ convolution\\(\\S+, (\\S+)\\)", text).group(1)
                out["hlo"][formulation] = re.search(rf"{re.escape(kernel)} = \\S+ (\\w+)\\(", text).group(1)
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def measured():
    return float64_jax_script(SCRIPT)


@pytest.mark.slow
def test_the_forward_is_kerass_and_the_gradients_autodiffs(measured):
    assert len(measured["cases"]) == 6
    for case in measured["cases"]:
        assert case["y"] == 0.0, case  # both forwards give Keras's bits on a CPU
        numbers = [v for k, v in case.items() if k not in ("formulation", "side")]
        assert max(numbers) < 1e-12, case  # float64: the same sums in another order


def test_linear_transposes_forward_takes_the_reversed_kernel(measured):
    # XLA's GPU compiler rewrites convolution(dilated x, reverse(kernel)) into cuDNN's backward-input
    # convolution; Keras's forward puts a transpose (here, one output channel: a reshape) in between.
    assert measured["hlo"] == {"adjoint": "reshape", "linear_transpose": "reverse"}, measured["hlo"]


def test_an_unknown_formulation_is_one_line():
    with pytest.raises(
        UserError,
        match="^--jax_conv_transpose 'fast': choose one of adjoint, linear_transpose, autodiff$",
    ):
        Config(jax_conv_transpose="fast").validate()
