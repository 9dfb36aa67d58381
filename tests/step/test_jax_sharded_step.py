"""The JAX step over a mesh of four virtual CPU devices (jax_sharded_runner.py, its own process: the
test process runs Keras on TensorFlow, and XLA_FLAGS must be set before JAX starts): the same update as
one device on the same global batch, and an overflow on one device's shard skipping that optimizer on
every device."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from api_runs import FAST_XLA

try:
    import jax  # noqa: F401
except ImportError as error:
    pytest.skip(f"jax is not installed ({error})", allow_module_level=True)

# The tolerances of the TF/JAX comparison (a different reduction order is the only difference here).
from test_jax_step import FLOAT32_LOSSES, FLOAT32_MOMENTS, LOSSES, _relative  # noqa: E402

from acgan.step.common import METRIC_NAMES  # noqa: E402

RUNNER = Path(__file__).with_name("jax_sharded_runner.py")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("sharded") / "out.npz"
    env = dict(
        os.environ,
        KERAS_BACKEND="jax",
        JAX_PLATFORMS="cpu",
        TF_CPP_MIN_LOG_LEVEL="2",
        XLA_FLAGS=f"{FAST_XLA} --xla_force_host_platform_device_count=4",
    )
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode:
        pytest.fail(f"the sharded runner failed ({done.returncode}):\n{done.stderr[-4000:]}")
    with np.load(out) as saved:
        return dict(saved)


def _moments(run, name):
    return [
        run[f"steps/{name}/moments/{j}"]
        for j in range(sum(k.startswith(f"steps/{name}/moments/") for k in run))
    ]


def _state(run, mode, name):
    keys = [str(k) for k in run[f"{mode}/keys"]]
    return {key: run[f"{mode}/{name}/state/{i}"] for i, key in enumerate(keys)}


@pytest.mark.slow
def test_the_sharded_step_equals_the_one_device_step(runs):
    # The batch of 16 is split 4 rows per device; the state is replicated, every copy the same.
    assert runs["steps/shard_rows"].tolist() == [[4] * 4] * 4
    assert runs["steps/copies_equal"]
    one, mesh = runs["steps/one/metrics"], runs["steps/mesh/metrics"]
    for step in range(2):
        assert np.all(
            np.abs(mesh[step, LOSSES] - one[step, LOSSES]) / np.abs(one[step, LOSSES])
            < FLOAT32_LOSSES
        )
        # Accuracies, scales and skip counts are exact.
        np.testing.assert_array_equal(mesh[step, 3:], one[step, 3:])
    # Every optimizer's first moments after one step: (1 - beta_1) * the gradient it applied.
    difference = _relative(_moments(runs, "mesh"), _moments(runs, "one"))
    assert difference < FLOAT32_MOMENTS, difference
    # After two steps the weights agree. Not compared: the biases ahead of a batch norm, whose true gradient
    # is zero (Adam turns its rounding noise, which any change of reduction order changes, into steps of
    # the learning rate's size: measured 5e-3 on d_conv2's bias, as in the TF/JAX comparison), and the
    # moving means that follow them.
    one_state, mesh_state = _state(runs, "steps", "one"), _state(runs, "steps", "mesh")
    assert int(mesh_state["step"]) == 2 and int(one_state["step"]) == 2
    weights = [
        k for k in one_state if k.startswith("models/") and k.endswith(("kernel", "gamma", "beta"))
    ]
    assert len(weights) > 10
    assert (
        _relative([mesh_state[k] for k in weights], [one_state[k] for k in weights])
        < FLOAT32_MOMENTS
    )
    # G's moving average (in the state, replicated: copies_equal above covers it) follows the same weights.
    averages = [
        k
        for k in one_state
        if k.startswith("ema/generator/") and k.endswith(("kernel", "gamma", "beta"))
    ]
    assert len(averages) > 3
    assert (
        _relative([mesh_state[k] for k in averages], [one_state[k] for k in averages])
        < FLOAT32_MOMENTS
    )
    integers = [k for k in one_state if one_state[k].dtype.kind != "f"]
    assert all(np.array_equal(mesh_state[k], one_state[k]) for k in integers)


def test_an_overflow_on_one_device_skips_that_optimizer_on_every_device(runs):
    """D's loss is non-finite only in device 2's rows; the gradient every device's D optimizer checks is
    the all-reduced one, so D skips everywhere and its scale halves once; G and Q step."""
    metrics = dict(zip(METRIC_NAMES, runs["overflow/mesh/metrics"][0]))
    assert not np.isfinite(metrics["d_loss"])
    assert (metrics["d_loss_scale"], metrics["g_loss_scale"], metrics["q_loss_scale"]) == (
        128.0,
        256.0,
        256.0,
    )
    assert (metrics["d_skipped"], metrics["g_skipped"], metrics["q_skipped"]) == (1.0, 0.0, 0.0)
    # every device's copy of the state, scales included, is the same
    assert runs["overflow/copies_equal"]
    keys = [str(k) for k in runs["overflow/keys"]]
    before = {key: runs[f"overflow/mesh/before/{i}"] for i, key in enumerate(keys)}
    after = _state(runs, "overflow", "mesh")
    # D's head is D's alone (the trunk also moves with Q's update): untouched, its Adam slots too.
    d_only = [
        k
        for k in keys
        if k.startswith(("models/d_head/", "optimizers/d_optimizer_adam/")) and "moving" not in k
    ]
    assert len(d_only) > 4 and all(np.array_equal(after[k], before[k]) for k in d_only)
    g_weights = [k for k in keys if k.startswith("models/generator/") and "moving" not in k]
    assert any(not np.array_equal(after[k], before[k]) for k in g_weights)
    assert int(after["step"]) == int(before["step"]) + 1
