"""Per policy: float32 variables, compute-dtype activations, float32 islands and outputs."""

import keras
import numpy as np
import pytest

from acgan.model import networks
from conftest import POLICIES

COMPUTE_DTYPE = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}


def _layer_outputs(model, inputs):
    """Runs `model` and returns {layer name: output dtype} for every layer, from a real forward pass."""
    probe = keras.Model(model.input, [layer.output for layer in model.layers[len(model.inputs) :]])
    outputs = probe(inputs, training=True)
    return {
        layer.name: str(out.dtype.name if hasattr(out.dtype, "name") else out.dtype)
        for layer, out in zip(model.layers[len(model.inputs) :], outputs)
    }


@pytest.mark.parametrize("policy", POLICIES)
def test_policy_dtypes(policy, set_policy):
    set_policy(policy)
    compute = COMPUTE_DTYPE[policy]
    m = networks.build_models((28, 28, 1), 10, width=0.25)
    classifier = networks.build_classifier(m)
    for part in m:
        assert {v.dtype for v in part.variables} == {"float32"}, part.name

    z = np.random.uniform(-1, 1, (4, networks.NOISE_DIM)).astype(np.float32)
    labels = np.arange(4, dtype=np.int32)
    images = np.random.uniform(0, 1, (4, 28, 28, 1)).astype(np.float32)
    features = m.trunk(images)
    dtypes = {}
    dtypes.update(_layer_outputs(m.generator, [z, labels]))
    dtypes.update(_layer_outputs(m.trunk, images))
    dtypes.update(_layer_outputs(m.q_head, features))
    for name, dtype in dtypes.items():
        if "_bn" in name:
            assert dtype == "float32", f"batch norm {name} computes in {dtype}"
        elif any(kind in name for kind in ("conv", "_fc", "relu")):
            assert dtype == compute, f"{name} computes in {dtype}, expected {compute}"
    assert {n for n in dtypes if "_bn" in n} >= {
        "g_bn1",
        "g_bn2",
        "g_bn3",
        "d_bn2",
        "d_bn3",
        "q_bn1",
    }

    assert m.generator([z, labels]).dtype == "float32"
    assert m.d_head(features).dtype == "float32"
    assert m.q_head(features).dtype == "float32"
    probabilities = classifier(images)
    assert probabilities.dtype == "float32"
    assert classifier.get_layer("q_probs").compute_dtype == "float32"
    np.testing.assert_allclose(np.sum(probabilities, axis=-1), 1.0, rtol=1e-5)
