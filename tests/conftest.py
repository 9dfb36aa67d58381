"""Shared fixtures: the dtype policy is global state, so every test that sets it restores float32."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import pytest  # noqa: E402

POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
CPU_REPLICAS = 2


def pytest_configure(config):
    """Two logical CPU devices, so tf.distribute tests can run two replicas on this one CPU.

    It must happen before TensorFlow sets up its devices, that is before any test runs.
    """
    from acgan.step import distribute

    distribute.split_host_cpu(CPU_REPLICAS)


@pytest.fixture
def set_policy():
    """Call with a policy name; the global policy goes back to float32 after the test."""
    from acgan.model import precision

    yield precision.set_policy
    keras.mixed_precision.set_global_policy("float32")
