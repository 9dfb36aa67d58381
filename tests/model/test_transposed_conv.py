"""TransposedConv2D on JAX: Keras's forward, and the strided convolution's own gradients (the adjoint
formulation) equal autodiff's (ACGAN_JAX_CONV_TRANSPOSE=autodiff) on random inputs."""
import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json, os
    import jax, jax.numpy as jnp, numpy as np
    from acgan.model.transposed_conv import TransposedConv2D

    out = []
    for side, inputs, filters in ((7, 16, 8), (14, 8, 1), (4, 5, 3)):
        layer = TransposedConv2D(filters, 4, strides=2, padding="same", dtype="float64")
        rng = np.random.RandomState(side)
        x = rng.randn(3, side, side, inputs)
        layer.build(x.shape)
        weights = [jnp.asarray(rng.randn(*v.shape)) for v in layer.trainable_variables]
        dy = rng.randn(3, 2 * side, 2 * side, filters)

        def loss(weights, x, formulation):
            os.environ["ACGAN_JAX_CONV_TRANSPOSE"] = formulation   # read when the layer is traced
            y, _ = layer.stateless_call(weights, [], x)
            return jnp.sum(y * dy), y

        (_, y_a), g_a = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(weights, x, "adjoint")
        (_, y_b), g_b = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(weights, x, "autodiff")
        rel = lambda a, b: float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b))
        out.append({"y": rel(y_a, y_b), "dx": rel(g_a[1], g_b[1]), "dkernel": rel(g_a[0][0], g_b[0][0]),
                    "dbias": rel(g_a[0][1], g_b[0][1])})
    print(json.dumps(out))
""")


def test_adjoint_gradients_equal_autodiff():
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", JAX_ENABLE_X64="1")
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for case in json.loads(done.stdout.strip().splitlines()[-1]):
        assert case["y"] == 0.0, case                      # the forward is Keras's own
        assert max(case.values()) < 1e-12, case            # float64: the same sums in another order
