"""The JAX step (jax_step.JaxStep) against the TensorFlow step, from the same weights and batch.

This process runs Keras on TensorFlow (conftest), and Keras takes its backend once per process, so the
JAX side runs in a subprocess (jax_step_runner.py, KERAS_BACKEND=jax, TensorFlow blocked) and the two
exchange weights, batch and results through .npz files. One subprocess runs every JAX job the selected
tests need (the module fixture `jax_runs`, from JOBS and NEEDS), since most of a child's cost is
importing JAX and Keras; each test then reads its job's result. The TensorFlow side is the TF step as
the other tests run it, here in this process, in each test. Weights are built once (float32, seeded)
and the batch and noise come from numpy, so both steps see the same bytes.

Sizes: width 0.125 and batch 16 (seed 0) are those the tolerances below were measured at; every job
compiles its own step, so the jobs are the cases that run different code (one per policy, per preset
switch, the injected overflows), and the overflow job compiles its step once for all its victims.

Compared, per optimizer (all of D's, all of G's, all of Q's variables concatenated, as in
test_mixed_precision_numerics.py): the losses, and Adam's first moments after the first step, i.e.
(1 - beta_1) * the unscaled gradient each optimizer applied.
"""

import dataclasses
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

try:
    import jax  # noqa: F401
except ImportError as error:
    pytest.skip(
        f"jax is not installed ({error}); pip install -e '.[jax]' to test the JAX step",
        allow_module_level=True,
    )

from acgan import presets  # noqa: E402
from acgan.model import networks, precision  # noqa: E402
from acgan.model.blocks import BN_MOMENTUM  # noqa: E402
from acgan.step import tf_step  # noqa: E402
from acgan.step.common import LOSS_METRICS, METRIC_NAMES  # noqa: E402

RUNNER = Path(__file__).with_name("jax_step_runner.py")
REPO = Path(__file__).resolve().parents[2]
WIDTH, BATCH, SEED = 0.125, 16, 0
SHAPES = {"reference": (28, 28, 1), "acgan_cifar": (32, 32, 3)}
NAMES = ("d", "g", "q")
# distinct, so a scale used by the wrong optimizer shows
PINNED_SCALES = {
    "d": 64.0,
    "g": 256.0,
    "q": 1024.0,
}
LOSSES = slice(0, 3)
FLOAT32_LOSSES = 1e-5  # relative, each loss
FLOAT32_MOMENTS = 1e-4  # relative L2 per optimizer; measured 2.6e-5 at most, see test_float32_step_matches_the_tf_step


@functools.lru_cache(maxsize=None)
def _initial_weights(arch="reference"):
    """{model name: [values in model.variables order]}, {model name: [paths]}: float32, seeded (the same
    values on every call, so built once; read them, do not change them)."""
    with precision.float32_policy():
        keras.utils.set_random_seed(SEED)
        models = networks.build_models(SHAPES[arch], 10, width=WIDTH, arch=arch)
    return (
        {m.name: [v.numpy() for v in m.variables] for m in models},
        {m.name: [v.path for v in m.variables] for m in models},
    )


def _batch(n=BATCH, seed=SEED, arch="reference"):
    """(uint8 images, labels, z uniform in [-1, 1] as sample_noise draws it, fake labels), with numpy."""
    rng = np.random.default_rng(seed)
    noise_dim = presets.PRESETS[arch].networks.noise_dim
    return (
        rng.integers(0, 256, (n,) + SHAPES[arch], dtype=np.uint8),
        rng.integers(0, 10, n).astype(np.int32),
        rng.uniform(-1.0, 1.0, (n, noise_dim)).astype(np.float32),
        rng.integers(0, 10, n).astype(np.int32),
    )


def _write_job(
    path,
    mode,
    policy,
    weights,
    batch,
    jit=True,
    d_learning_rate=None,
    scales=None,
    steps=1,
    q_learns_from_fakes=True,
    g_learns_from_q=True,
    learning_rate_scale=None,
    arch="reference",
    augment=None,
    loss="nonsaturating",
):
    """Writes this job for jax_step_runner.py to `path`."""
    values, paths = weights
    job = {
        "mode": mode,
        "policy": policy,
        "width": WIDTH,
        "jit": jit,
        "steps": steps,
        "arch": arch,
        "shape": np.array(SHAPES[arch]),
        "loss": loss,
        "q_learns_from_fakes": q_learns_from_fakes,
        "g_learns_from_q": g_learns_from_q,
        "images": batch[0],
        "labels": batch[1],
        "z": batch[2],
        "fake_labels": batch[3],
    }
    for model, arrays in values.items():
        for i, (value, path_) in enumerate(zip(arrays, paths[model])):
            job[f"weights/{model}/{i}"], job[f"paths/{model}/{i}"] = value, path_
    if d_learning_rate is not None:
        job["d_learning_rate"] = d_learning_rate
    if learning_rate_scale is not None:
        job["learning_rate_scale"] = learning_rate_scale
    if augment:
        job["augment"] = ",".join(augment)
    for name, scale in (scales or {}).items():
        job[f"scale/{name}"] = scale
    np.savez(path, **job)


def _paper_options(loss):
    """The acgan_cifar preset's step options (presets.ACGAN_CIFAR), with real/fake loss `loss`."""
    options = {
        "q_learns_from_fakes": False,
        "g_learns_from_q": False,  # the preset's (presets.ACGAN_CIFAR)
        "augment": presets.ACGAN_CIFAR.augment,  # the same draws on both backends
        "loss": loss,
    }
    options["learning_rate_scale"] = 0.5  # halfway through the preset's learning-rate decay
    return options


def _mixed_scales(policy):
    return PINNED_SCALES if precision.needs_loss_scaling(policy) else None


# The paper preset's switches compared under hinge only: its own loss, nonsaturating, is the loss of every
# other job here (float32, q_real_only, the mixed ones, overflow), and the real/fake loss is a function of
# D's logits alone (losses.py), whatever networks produce them; so one acgan_cifar job runs both losses.
PAPER_LOSSES = ("hinge",)
MIXED_POLICIES = ("mixed_float16", "mixed_bfloat16")
# The JAX runs, by name: _write_job's arguments but the weights and batch (_initial_weights(arch),
# _batch(arch=arch), with arch from the arguments).
JOBS = {
    "float32": {"mode": "steps", "policy": "float32"},
    "q_real_only": {"mode": "steps", "policy": "float32", "q_learns_from_fakes": False},
    **{
        f"acgan_cifar-{loss}": {
            "mode": "steps",
            "policy": "float32",
            "arch": "acgan_cifar",
            **_paper_options(loss),
        }
        for loss in PAPER_LOSSES
    },
    **{
        policy: {
            "mode": "steps",
            "policy": policy,
            "d_learning_rate": 0.0,
            "scales": _mixed_scales(policy),
        }
        for policy in MIXED_POLICIES
    },
    "overflow": {
        "mode": "overflow",
        "policy": "mixed_float16",
        "scales": {name: 256.0 for name in NAMES},
    },
}
# The jobs each test reads, by test function; a name is formatted with the test's parameters.
NEEDS = {
    "test_float32_step_matches_the_tf_step": ("float32",),
    "test_q_learning_from_real_images_only_matches_the_tf_step": ("float32", "q_real_only"),
    "test_the_paper_preset_step_matches_the_tf_step": ("acgan_cifar-{loss}",),
    "test_batch_norm_statistics_move_as_on_tensorflow": ("float32",),
    "test_mixed_step_agrees_with_the_tf_step_within_rounding": ("{policy}",),
    "test_overflow_in_one_loss_skips_only_that_optimizer": ("overflow",),
}


class JaxRuns:
    """The runner's one process over the jobs in `directory`: its exit status and stderr, and each
    job's result."""

    def __init__(self, directory, names, done):
        self.directory, self.names, self.done = directory, names, done
        self._results = {}

    def _failure(self, what):
        stderr = self.done.stderr
        marker = f"== job {what}\n"
        if marker in stderr:  # the job's own part of stderr (its traceback included)
            stderr = stderr.split(marker, 1)[1].split("\n== ", 1)[0]
        pytest.fail(f"the JAX runner failed ({self.done.returncode}) on {what}:\n{stderr[-4000:]}")

    def imports(self):
        """What the runner saw after importing the JAX step with TensorFlow blocked."""
        path = self.directory / "imports.json"
        if not path.exists():
            self._failure("its imports")
        return json.loads(path.read_text())

    def __getitem__(self, name):
        """Job `name`'s result: what the runner saved."""
        assert name in self.names, (
            f"job {name!r} was not run: add it to NEEDS for the test that reads it"
        )
        if name not in self._results:
            path = self.directory / f"{name}.out.npz"
            if not path.exists():
                self._failure(name)
            with np.load(path) as out:
                self._results[name] = dict(out)
        return self._results[name]


def _tf_step(
    policy,
    weights,
    batch,
    d_learning_rate=None,
    scales=None,
    q_learns_from_fakes=True,
    g_learns_from_q=True,
    learning_rate_scale=None,
    arch="reference",
    augment=None,
    loss="nonsaturating",
):
    """One TF step (graph, XLA off) under `policy` from `weights`: its metric vector, first moments,
    fingerprint of the initial weights, and the models before the step (for batch statistics)."""
    values, _ = weights
    try:
        precision.set_policy(policy)
        models = networks.build_models(SHAPES[arch], 10, width=WIDTH, arch=arch)
        for model in models:
            for variable, value in zip(model.variables, values[model.name]):
                variable.assign(value)
        preset = dataclasses.replace(
            presets.REFERENCE,
            q_learns_from_fakes=q_learns_from_fakes,
            g_learns_from_q=g_learns_from_q,
            augment=augment,
            loss=loss,
        )
        trainer = tf_step.TensorFlowStep(models, 10, preset, jit=False)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    if learning_rate_scale is not None:
        trainer.set_learning_rate_scale(learning_rate_scale)
    if d_learning_rate is not None:
        trainer.d_optimizer.learning_rate.assign(d_learning_rate)
    for name, scale in (scales or {}).items():
        getattr(trainer, f"{name}_optimizer").dynamic_scale.assign(scale)
    fingerprint = trainer.weights_fingerprint()
    vector = np.asarray(trainer.train_step(*batch).vector)
    moments = {}
    for name, (optimizer, variables) in zip(NAMES, trainer._optimizers_and_variables()):
        adam = optimizer.inner_optimizer if precision.is_loss_scaled(optimizer) else optimizer
        moments[name] = [v.numpy() for v in adam.variables if v.path.endswith("_momentum")]
        assert len(moments[name]) == len(variables)
    return {
        "metrics": vector,
        "moments": moments,
        "fingerprint": fingerprint,
        "trainable_counts": {m.name: len(m.trainable_variables) for m in models},
    }


def _jax_moments(out):
    return {
        name: [
            out[f"moments/{name}/{j}"]
            for j in range(sum(k.startswith(f"moments/{name}/") for k in out))
        ]
        for name in NAMES
    }


def _relative(got, reference):
    """Relative L2 difference of two lists of arrays, concatenated."""
    got, reference = (
        np.concatenate([np.ravel(x) for x in arrays]).astype(np.float64)
        for arrays in (got, reference)
    )
    return float(np.linalg.norm(got - reference) / np.linalg.norm(reference))


def _worst(got, reference, count=4):
    """The `count` tensors contributing most to the difference: [(index, |diff|, |reference|)]."""
    rows = [
        (
            i,
            float(np.linalg.norm(a.astype(np.float64) - b)),
            float(np.linalg.norm(b.astype(np.float64))),
        )
        for i, (a, b) in enumerate(zip(got, reference))
    ]
    return sorted(rows, key=lambda row: -row[1])[:count]


def _relative_losses(got, reference):
    return np.abs(got[LOSSES] - reference[LOSSES]) / np.abs(reference[LOSSES])


@pytest.fixture(scope="module")
def weights():
    return _initial_weights()


@pytest.fixture(scope="module")
def jax_runs(request, tmp_path_factory):
    """Every JAX job the selected tests of this module need (NEEDS), run in one jax_step_runner.py
    process: Keras takes one backend per process, and one child for all jobs pays JAX's and Keras's
    import once. A job that fails there fails the tests that read it, with its part of the child's stderr."""
    names = sorted(
        {
            job.format(**(item.callspec.params if hasattr(item, "callspec") else {}))
            for item in request.session.items
            if item.module is request.module
            for job in NEEDS.get(item.originalname, ())
        }
    )
    directory = tmp_path_factory.mktemp("jax_steps")
    for name in names:
        arch = JOBS[name].get("arch", "reference")
        _write_job(
            directory / f"{name}.job.npz",
            weights=_initial_weights(arch),
            batch=_batch(arch=arch),
            **JOBS[name],
        )
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(directory)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return JaxRuns(directory, names, done)


@pytest.fixture(scope="module")
def float32_runs(weights, jax_runs):
    """The TF and the JAX step's first float32 step from the same weights and batch."""
    batch = _batch()
    tf_run = _tf_step("float32", weights, batch)
    return batch, tf_run, jax_runs["float32"]


@pytest.mark.slow
def test_the_jax_step_never_imports_tensorflow(jax_runs):
    """The runner blocks `import tensorflow` before importing Keras, acgan.step.jax_step,
    acgan.step.common and acgan.training.health: it gets that far, on JAX, with TensorFlow still blocked."""
    imports = jax_runs.imports()
    assert imports == {"backend": "jax", "tensorflow_blocked": True}, (
        imports,
        jax_runs.done.stderr[-3000:],
    )


@pytest.mark.slow
def test_float32_step_matches_the_tf_step(float32_runs):
    _, tf_run, jax_run = float32_runs
    assert str(jax_run["compile_mode"]) == "step"
    # The same weights give the same fingerprint on both backends.
    assert str(jax_run["fingerprint"]) == tf_run["fingerprint"]
    jax_metrics = jax_run["metrics"][0]
    # Measured (this 2-core EPYC, seed 0): losses off by 0 (d, q) and 3.4e-7 (g) relative.
    assert np.all(_relative_losses(jax_metrics, tf_run["metrics"]) < FLOAT32_LOSSES), (
        jax_metrics,
        tf_run["metrics"],
    )
    accuracies = slice(3, len(LOSS_METRICS))
    np.testing.assert_array_equal(jax_metrics[accuracies], tf_run["metrics"][accuracies])
    # Scales 1, nothing skipped: the rest of the vector is exact.
    np.testing.assert_array_equal(
        jax_metrics[len(LOSS_METRICS) :], tf_run["metrics"][len(LOSS_METRICS) :]
    )
    assert list(METRIC_NAMES[len(LOSS_METRICS) : len(LOSS_METRICS) + 3]) == [
        "d_loss_scale",
        "g_loss_scale",
        "q_loss_scale",
    ]
    jax_moments = _jax_moments(jax_run)
    for name in NAMES:
        # The first moments cannot match to 1e-5: that is below float32's own implementation noise here.
        # Measured (this 2-core EPYC, seed 0, width 0.125, batch 16), relative L2, d / g / q:
        #   JAX against TF (graph, XLA off)            2.6e-5 / 1.5e-5 / 1.4e-5
        #   TF with XLA against TF without (same step) 3.4e-5 / 1.8e-5 / 1.9e-5
        #   TF against TF rerun                        0 (deterministic)
        # So JAX sits inside the spread of TF's own two compilations; 1e-4 leaves 3x margin over it, and
        # a wrong step (G's statistics moved twice, a cotangent lost, D's update after G's) is >= 1e-3.
        # (Largest D contributions: d_conv2's kernel, 2.3e-5, and its bias before batch norm, whose
        # true gradient is zero and whose moment is pure rounding, 1e-5 on a norm of 1e-5.)
        difference = _relative(jax_moments[name], tf_run["moments"][name])
        assert difference < FLOAT32_MOMENTS, (
            name,
            difference,
            _worst(jax_moments[name], tf_run["moments"][name]),
        )
    assert int(jax_run["step"]) == 1


@pytest.mark.slow
def test_q_learning_from_real_images_only_matches_the_tf_step(float32_runs, weights, jax_runs):
    """q_learns_from_fakes=False (the acgan_cifar preset's setting) on both backends: the same first
    moments, and against the default step only Q's trunk and head moments change, not G's."""
    batch, default_tf, _ = float32_runs
    tf_run = _tf_step("float32", weights, batch, q_learns_from_fakes=False)
    jax_run = jax_runs["q_real_only"]
    jax_moments = _jax_moments(jax_run)
    for name in NAMES:
        difference = _relative(jax_moments[name], tf_run["moments"][name])
        assert difference < FLOAT32_MOMENTS, (
            name,
            difference,
            _worst(jax_moments[name], tf_run["moments"][name]),
        )
    q_new, q_default = tf_run["moments"]["q"], default_tf["moments"]["q"]
    n_g = len(tf_run["moments"]["g"])  # Q's list ends with G's variables
    # G still gets the fake batch's class loss
    assert _relative(q_new[-n_g:], q_default[-n_g:]) < 1e-6
    # the trunk and Q head no longer learn from it
    assert _relative(q_new[:-n_g], q_default[:-n_g]) > 1e-2
    assert _relative(tf_run["moments"]["d"], default_tf["moments"]["d"]) < 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("loss", PAPER_LOSSES)
def test_the_paper_preset_step_matches_the_tf_step(loss, jax_runs):
    """acgan_cifar (spectral norm, minibatch spread, the projection D head, Q learning from real images
    only, G learning from D alone, D's inputs augmented) on both backends from the same weights and batch,
    the learning rates halved as the preset's decay halves them: the same losses and first moments, the
    rates the compiled step used; Q's optimizer holds the trunk and Q head only. With either real/fake loss."""
    weights, batch = _initial_weights("acgan_cifar"), _batch(arch="acgan_cifar")
    options = _paper_options(loss)  # the preset's, halfway through its learning-rate decay
    tf_run = _tf_step("float32", weights, batch, arch="acgan_cifar", **options)
    jax_run = jax_runs[f"acgan_cifar-{loss}"]  # JOBS: the same options, weights and batch
    trainable = tf_run["trainable_counts"]
    # no G in Q's list
    assert len(tf_run["moments"]["q"]) == trainable["trunk"] + trainable["q_head"]
    # The compiled step used the halved rates: Adam's first step with beta_1 0 moves a weight by at most
    # its rate (|g| / (|g| + eps)), and G's largest move is close to it.
    # G's; the runner's step keeps the default rates
    rate = presets.REFERENCE.learning_rates[1] * 0.5
    assert jax_run["state/optimizers/g_optimizer_adam/learning_rate"] == np.float32(rate)
    moves = [
        np.abs(jax_run[f"state/models/generator/{path}"] - value).max()
        for value, path in zip(weights[0]["generator"], weights[1]["generator"])
        if f"state/models/generator/{path}" in jax_run and "moving" not in path
    ]
    assert 0.9 * rate < max(moves) <= rate * (1 + 1e-5), (max(moves), rate)
    assert np.all(_relative_losses(jax_run["metrics"][0], tf_run["metrics"]) < FLOAT32_LOSSES)
    jax_moments = _jax_moments(jax_run)
    for name in NAMES:
        difference = _relative(jax_moments[name], tf_run["moments"][name])
        assert difference < FLOAT32_MOMENTS, (
            name,
            difference,
            _worst(jax_moments[name], tf_run["moments"][name]),
        )
    # D's projection embedding ([10, features], the one such matrix D trains) learned from both batches'
    # labels, the real ones and G's: a class in neither has a zero moment, on both backends.
    real, fake = set(batch[1]), set(batch[3])
    real_only, fake_only, seen = real - fake, fake - real, real | fake
    assert real_only and fake_only and len(seen) < 10  # so each batch's labels show on their own
    for moments in (jax_moments["d"], tf_run["moments"]["d"]):
        [embedding] = [m for m in moments if m.ndim == 2 and m.shape[0] == 10]
        assert [bool(np.abs(row).max() > 0) for row in embedding] == [k in seen for k in range(10)]


def _batch_mean(model, layer, inputs):
    """Mean over the batch of what `layer` (a batch norm) receives (TF, float32, initial weights)."""
    source = keras.Model(model.inputs, model.get_layer(layer).input)
    with keras.StatelessScope():
        return np.mean(np.asarray(source(inputs, training=True), np.float64), axis=0)


@pytest.mark.slow
def test_batch_norm_statistics_move_as_on_tensorflow(float32_runs, weights):
    """G's batch norms move once (0.1 x the batch mean from a zero start; G run twice would give 0.19 x);
    the trunk's move for the real then the fake batch in D's pass only, not again in G/Q's."""
    (images, _, z, fake_labels), _, jax_run = float32_runs
    values, _ = weights
    with precision.float32_policy():
        models = networks.build_models((28, 28, 1), 10, width=WIDTH)
    for model in models:
        for variable, value in zip(model.variables, values[model.name]):
            variable.assign(value)
    g, trunk = models.generator, models.trunk
    for name in ("g_bn1", "g_bn2"):
        expected = (1 - BN_MOMENTUM) * _batch_mean(g, name, [z, fake_labels])
        np.testing.assert_allclose(
            jax_run[f"state/models/generator/{name}/moving_mean"],
            expected,
            rtol=2e-2,
            atol=1e-6,
            err_msg=name,
        )
    with keras.StatelessScope():
        fake = np.asarray(g([z, fake_labels], training=True))
    m_real, m_fake = (
        _batch_mean(trunk, "d_bn3", x) for x in (images.astype(np.float32) / 255.0, fake)
    )
    expected = (1 - BN_MOMENTUM) * (BN_MOMENTUM * m_real + m_fake)
    np.testing.assert_allclose(
        jax_run["state/models/trunk/d_bn3/moving_mean"], expected, rtol=2e-2, atol=1e-6
    )


# Mixed precision: how close the JAX step must come to the TF step of the same policy. The yardstick
# is the policy's own rounding: how far TF mixed is from TF float32 from the same weights and batch
# (relative L2 of an optimizer's first moments). Measured on this 2-core EPYC, width 0.125, batch 16,
# seeds 0-2 (weights and batch), relative L2 to TF float32's first moments, d / g / q:
#   mixed_float16   TF   0.149-0.308 / 0.212-0.267 / 0.056-0.121
#                   JAX  0.182-0.228 / 0.210-0.267 / 0.091-0.171   JAX / TF at most 1.64 (q, seed 1)
#   mixed_bfloat16  TF   0.362-0.600 / 0.647-0.869 / 0.197-0.493
#                   JAX  0.469-1.099 / 0.673-0.859 / 0.260-0.563   JAX / TF at most 1.86 (d, seed 0)
# JAX against TF mixed directly: 0.20-0.35 / 0.11-0.30 / 0.05-0.17 (float16), 0.31-0.99 / 0.14-0.31 /
# 0.15-0.47 (bfloat16): the two backends round differently (TF's CPU kernels against XLA's), about as
# far apart as two independent roundings (sqrt 2 x the noise), except G under bfloat16, where they
# round nearly alike (cosine 0.976-0.990 to each other, 0.61-0.79 to float32).
# Norm ratio JAX / float32: 0.918-1.021 (float16), 0.847-1.267 (bfloat16); cosine to float32 down to
# 0.964 (float16) and 0.552 (bfloat16, D at seed 0: below test_mixed_precision_numerics' 0.6, which
# was set at batch 32; at batch 16 TF's own D cosine is 0.82 there).
# Losses, JAX against TF mixed, relative: <= 2.9e-4 (float16), <= 8.9e-4 (bfloat16), inside one unit
# roundoff of the compute dtype (2^-11 = 4.9e-4 and 2^-8 = 3.9e-3); the bound is two.
# A loss-scaling bug moves a norm by the ratio of two pinned scales (>= 4x) or by a whole scale (the
# keras#19244 trap: 2^15 / 64 = 512x for D), far outside the norm-ratio bounds.
MIXED_BOUNDS = {  # policy: (max JAX distance / TF distance to float32, (lowest, highest) norm ratio, loss)
    "mixed_float16": (2.5, (0.75, 1.33), 2 * 2.0**-11),
    "mixed_bfloat16": (2.5, (0.5, 1.5), 2 * 2.0**-8),
}


@pytest.fixture(scope="module")
def frozen_d_float32(weights):
    """The TF float32 step with D's learning rate 0: the yardstick of both mixed policies' tests."""
    return _tf_step("float32", weights, _batch(), d_learning_rate=0.0)


@pytest.mark.slow
@pytest.mark.parametrize("policy", MIXED_POLICIES)
def test_mixed_step_agrees_with_the_tf_step_within_rounding(
    policy, weights, jax_runs, frozen_d_float32
):
    """JAX mixed is no farther from float32 than TF mixed is, give or take the measured spread (see
    MIXED_BOUNDS), its gradients have the right size, and its losses agree with TF mixed's to the
    compute dtype's rounding.

    As in test_mixed_precision_numerics.py, D's learning rate is 0 for this step (Adam's first update
    moves every D weight by +-lr whatever the gradient's size, and the sign of a gradient that is
    mostly rounding differs between runs) and, under mixed_float16, each scale is pinned to its own
    value, written into the JAX step's state only: a scale frozen at the Keras variable's 2^15
    (keras#19244) would make the JAX gradients 2^15 / 64 = 512x to 32x too large."""
    batch = _batch()
    scales = _mixed_scales(policy)
    reference = frozen_d_float32
    tf_run = _tf_step(policy, weights, batch, d_learning_rate=0.0, scales=scales)
    jax_run = jax_runs[policy]  # JOBS: the same learning rate and scales
    jax_metrics = jax_run["metrics"][0]
    # Scales and skip counts are exact, and with these scales nothing overflows.
    np.testing.assert_array_equal(
        jax_metrics[len(LOSS_METRICS) :], tf_run["metrics"][len(LOSS_METRICS) :]
    )
    assert not jax_metrics[METRIC_NAMES.index("d_skipped") :].any()
    max_factor, (low, high), loss_bound = MIXED_BOUNDS[policy]
    loss_gap = _relative_losses(jax_metrics, tf_run["metrics"])
    assert np.all(loss_gap < loss_bound), loss_gap
    jax_moments = _jax_moments(jax_run)
    for name in NAMES:
        tf_noise = _relative(tf_run["moments"][name], reference["moments"][name])
        jax_noise = _relative(jax_moments[name], reference["moments"][name])
        ratio = _norm(jax_moments[name]) / _norm(reference["moments"][name])
        assert jax_noise < max_factor * tf_noise, (name, jax_noise, tf_noise)
        assert low < ratio < high, (name, ratio)


def _norm(arrays):
    return float(np.linalg.norm(np.concatenate([np.ravel(x) for x in arrays]).astype(np.float64)))


@pytest.mark.slow
def test_overflow_in_one_loss_skips_only_that_optimizer(jax_runs):
    """Under mixed_float16, from one settled state (scales pinned at 256: no natural overflow), each
    optimizer's loss in turn scaled to inf inside the jitted step: that optimizer skips (its Adam state
    and its own weights unchanged, its scale halved, its skip counted and its streak at 1, back to 0
    on the next honest step); the others step as usual; every weight stays finite."""
    out = jax_runs["overflow"]  # JOBS: the reference weights and batch, every scale pinned at 256
    settled = out["settled_metrics"]
    assert not settled[METRIC_NAMES.index("d_skipped") :].any(), dict(zip(METRIC_NAMES, settled))
    exclusive = {"d": "models/d_head/", "q": "models/q_head/", "g": None}  # G is shared with Q
    for victim in NAMES:
        metrics = out[f"{victim}/metrics"]
        value = dict(zip(METRIC_NAMES, metrics))
        following = dict(zip(METRIC_NAMES, out[f"{victim}/next_metrics"]))
        for name in NAMES:
            if name == victim:
                assert value[f"{name}_loss_scale"] == 128.0
                assert value[f"{name}_skipped"] == 1 and value[f"{name}_skipped_in_a_row"] == 1
                assert following[f"{name}_skipped_in_a_row"] == 0
            else:
                assert value[f"{name}_loss_scale"] == 256.0, (victim, name)
                assert value[f"{name}_skipped"] == 0 and value[f"{name}_skipped_in_a_row"] == 0
        adam = f"optimizers/{victim}_optimizer_adam/"
        for key in (k[len("settled/") :] for k in out if k.startswith(f"settled/{adam}")):
            np.testing.assert_array_equal(
                out[f"{victim}/after/{key}"], out[f"settled/{key}"], err_msg=key
            )
        for name, prefix in exclusive.items():
            if prefix is None:
                continue
            # Trainable weights only: batch-norm statistics move in the forward pass, skipped or not.
            keys = [
                k[len("settled/") :]
                for k in out
                if k.startswith(f"settled/{prefix}") and "/moving_" not in k
            ]
            moved = [
                not np.array_equal(out[f"{victim}/after/{k}"], out[f"settled/{k}"]) for k in keys
            ]
            if name == victim:
                assert not any(moved), (victim, keys)
            else:
                assert any(moved), f"{name}'s weights did not move when {victim} overflowed"
        for key in (k for k in out if k.startswith(f"{victim}/after/models/")):
            assert np.isfinite(out[key]).all(), key
