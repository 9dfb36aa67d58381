"""The step training runs (acgan.step) against the AC-GAN step as a textbook writes it: on the session's
backend, for both presets, in float32, one step from the same weights and batch gives the same weights
(trainable ones, batch-norm statistics, spectral-norm vectors) and the same losses.

The textbook step is written as keras-io's GAN examples write a train_step: a forward pass per loss, a
gradient call per loss, each optimizer (a fresh Keras Adam at the preset's rate and beta_1) applying
its own gradients, nothing shared between the losses. On TensorFlow that is tf.GradientTape and
apply_gradients; on JAX, jax.value_and_grad of stateless_call, and stateless_apply. It is the
specification of one iteration (algorithm.py's docstring says the same in prose):

    fake = G(z, c')                                   the one G forward whose statistics are kept
    1. D:  L_D = adv_D(D(x, c), D(fake, c'))          fake a constant; Adam(D): trunk + D head
    2. G:  L_G = adv_G(D(G(z, c'), c'))               through the updated D; Adam(G): G
       Q:  L_Q = ce(c, Q(x)) + ce(c', Q(G(z, c')))    through the updated trunk; Adam(Q): trunk +
                                                      Q head (+ G with g_learns_from_q)
       G's and Q's gradients taken at the same weights (D updated, G not yet), then applied.

The real step adds two fusions that pay on a GPU (algorithm.py): G runs once, the cotangents of L_G
and L_Q w.r.t. the fake images pulled back through that one forward; and L_G and L_Q share one trunk
forward per batch (one persistent tape on TensorFlow, one jitted program on JAX). They are
optimisations of the iteration above: a change of how the step computes passes here, as long as it
keeps the float32 arithmetic (see below); a change of what it computes fails.

What belongs to the preset, not to the fusions, the textbook takes as the step has it: the losses
(acgan.step.losses); DiffAugment with the step's own draws (acgan.step.augment: step 0, the REAL and
FAKE salts); q_learns_from_fakes (False: the fake batch's class loss moves no trunk or Q-head weight)
and g_learns_from_q (False: it moves no G weight, and Adam(Q) does not hold G); and which pass moves
which state: G's batch-norm statistics in the forward D trains on; the trunk's statistics and
spectral-norm vectors in D's pass, on the real batch and then the fake one; the Q head's statistics in
Q's pass, real then fake. The textbook's other passes are stateless calls (a keras.StatelessScope on
TensorFlow, a dropped state on JAX), each commented where it is made.

Both steps run the same way, so that they compute in one float32 arithmetic: on TensorFlow op by op
(the step's tf.functions run eagerly, as the textbook runs), on JAX each compiled whole by XLA (jit).
They then agree bit for bit today, and the tolerances below leave room for rounding only. A compiled
step against an uncompiled one would need far more: at the reference preset's first step the batch
norms normalise G's nearly constant first images, so a last-bit change in a weight moves the G and Q
gradients ~100 times as much, and Adam's first step, about lr * sign(gradient), turns near-zero
gradients' rounding into whole steps. On TensorFlow, compiling the textbook (tf.function, or XLA) moves
its reference G and Q gradients by 1e-3 to 4e-3 (relative L2) from its eager self, as much as compiling
moves the fused step's; its D gradients by 1e-5 to 5e-5, and acgan_cifar's by less than 1e-6. So a
change that only reorders the arithmetic (a sum, or what XLA fuses) can fail the reference cases here:
then compare the optimizers' Adam moments, i.e. the gradients, which such a change moves by ~1e-3
(relative L2) and a change of what is computed by far more (G's and Q's taken through D before its
update: 0.3 to 1).

This file runs in both test sessions (tests/conftest.py, BOTH_SESSIONS), on the backend of its session.
"""

import contextlib
import dataclasses
import functools

import keras
import numpy as np
import pytest

from acgan import backend, presets
from acgan.model import networks, precision
from acgan.model.networks import d_head_inputs
from acgan.step import augment, losses
from acgan.step.common import LOSS_METRICS, MODEL_NAMES, OPTIMIZER_NAMES
from acgan.step.factory import build_step

BACKEND = keras.backend.backend()
NUM_CLASSES, WIDTH, BATCH, SEED = 10, 0.125, 8, 0
SHAPES = {"reference": (28, 28, 1), "acgan_cifar": (32, 32, 3)}
# The presets; and on TensorFlow, where a case costs a second, the reference preset with Q learning from
# real images only while G still learns the fake batch's class from Q: the one combination of the
# switches where the step takes Q's weight gradients and G's class cotangent in two backward passes
# (on JAX a case's compiles cost ~10 CPU-seconds; test_jax_step.py compares that branch of the JAX
# step with the TensorFlow step's).
CASES = {"reference": presets.REFERENCE, "acgan_cifar": presets.ACGAN_CIFAR}
if BACKEND == "tensorflow":
    CASES["reference-q_from_real_images"] = dataclasses.replace(
        presets.REFERENCE, q_learns_from_fakes=False
    )
# How both steps run (see above): eagerly on TensorFlow, compiled whole on JAX.
JIT = BACKEND == "jax"
# Adam's first step moves a weight by lr * g / (|g| + epsilon), about lr whatever the gradient's size;
# a last-bit difference in g moves it by far less, except where g is itself rounding noise (a bias
# before a batch norm, whose gradient is zero but for rounding). Trainable weights: within
# STEP_TOLERANCE of one step (x the largest rate of the optimizers that train them), beyond float32's
# own rounding of the weight (WEIGHT_RTOL). The losses, batch-norm statistics and spectral-norm vectors:
# float32 rounding of sums over the batch.
STEP_TOLERANCE, WEIGHT_RTOL = 1e-3, 1e-6
LOSS_RTOL, STATE_RTOL, STATE_ATOL = 1e-6, 1e-6, 1e-9


def _batch(preset):
    """(uint8 images, int labels, z uniform in [-1, 1], the int labels G is asked for), from numpy."""
    rng = np.random.default_rng(SEED)
    return (
        rng.integers(0, 256, (BATCH,) + _shape(preset), dtype=np.uint8),
        rng.integers(0, NUM_CLASSES, BATCH).astype(np.int32),
        rng.uniform(-1.0, 1.0, (BATCH, preset.networks.noise_dim)).astype(np.float32),
        rng.integers(0, NUM_CLASSES, BATCH).astype(np.int32),
    )


def _shape(preset):
    return SHAPES[preset.name]


def _models(preset, values=None):
    """The preset's models (float32, seeded), with `values` ({model name: [values in model.variables
    order]}) assigned when given."""
    backend.set_random_seed(SEED)
    models = networks.build_models(_shape(preset), NUM_CLASSES, width=WIDTH, arch=preset)
    for model in models if values else ():
        for variable, value in zip(model.variables, values[model.name]):
            variable.assign(value)
    return models


def _values(models):
    return {model.name: [_host(v) for v in model.variables] for model in models}


def _host(variable):
    """A copy of `variable`'s value as a numpy array (through the backend's own array: numpy 2 warns on
    np.array of a Keras variable or a TensorFlow tensor)."""
    value = variable.value
    return np.array(value.numpy() if BACKEND == "tensorflow" else value)


def _adams(preset):
    """Fresh Adams for D, G and Q at the preset's learning rates and beta_1 (Keras's other defaults)."""
    return [
        keras.optimizers.Adam(learning_rate=rate, beta_1=preset.beta_1, name=f"textbook_{name}")
        for name, rate in zip(OPTIMIZER_NAMES, preset.learning_rates)
    ]


def _trained(models, preset):
    """{optimizer name: the models whose trainable weights it trains}."""
    generator, trunk, d_head, q_head = models
    return {
        "d": (trunk, d_head),
        "g": (generator,),
        "q": (trunk, q_head) + ((generator,) if preset.g_learns_from_q else ()),
    }


def _augmented(images, salt, preset):
    """The preset's augmentation with the first step's draws for `salt` (the step's own policy)."""
    if not preset.augment:
        return images
    return augment.augment(images, augment.draws(0, images.shape[0], salt), preset.augment)


def _accuracy(labels, logits):
    ops = keras.ops
    hits = ops.equal(ops.cast(ops.argmax(logits, axis=-1), "int32"), ops.cast(labels, "int32"))
    return ops.mean(ops.cast(hits, "float32"))


# -- the textbook step on TensorFlow -------------------------------------------------------------------


def _textbook_tensorflow(models, preset, batch):
    """One textbook step on the Keras models' own variables, op by op; returns the losses (LOSS_METRICS'
    order) and the optimizers."""
    import tensorflow as tf

    generator, trunk, d_head, q_head = models
    d_adam, g_adam, q_adam = _adams(preset)
    trained = _trained(models, preset)
    d_variables, g_variables, q_variables = (
        [v for model in trained[name] for v in model.trainable_variables] for name in "dgq"
    )
    images, labels, z, fake_labels = (tf.constant(x) for x in batch)
    real = _augmented(tf.cast(images, tf.float32) / 255.0, augment.REAL, preset)

    def discriminator(images, classes):
        return d_head(d_head_inputs(d_head, trunk(images, training=True), classes), training=True)

    def generated():
        return _augmented(generator([z, fake_labels], training=True), augment.FAKE, preset)

    def apply(adam, grads, variables):
        # Dense first: Keras 3.15's Adam takes the second moment of a tf.IndexedSlices gradient (the
        # class embedding's) slice by slice, wrong when a class repeats (docs/development.md).
        adam.apply_gradients(zip([tf.convert_to_tensor(g) for g in grads], variables))

    # 1. D. This G forward moves G's batch-norm statistics (G's later forwards are stateless); D's pass
    #    moves the trunk's statistics and spectral-norm vectors, on the real batch and then the fake one.
    fake = generated()
    with tf.GradientTape() as tape:
        d_loss = losses.d_adversarial(
            preset.loss, discriminator(real, labels), discriminator(fake, fake_labels)
        )
    apply(d_adam, tape.gradient(d_loss, d_variables), d_variables)

    # 2. G through the updated D, a forward of its own, stateless (G's and the trunk's state moved in 1).
    with tf.GradientTape() as tape:
        with keras.StatelessScope():
            g_loss = losses.g_adversarial(preset.loss, discriminator(generated(), fake_labels))
    g_grads = tape.gradient(g_loss, g_variables)

    #    Q through the updated trunk, a forward of its own: G and each trunk call stateless (each trunk
    #    call in a scope of its own, so each reads the spectral-norm vectors D's pass left); the Q head's
    #    batch-norm statistics move, on the real batch and then the fake one.
    with tf.GradientTape(persistent=True) as tape:
        with keras.StatelessScope():
            fake = generated()
        with keras.StatelessScope():
            real_features = trunk(real, training=True)
        with keras.StatelessScope():
            fake_features = trunk(fake, training=True)
        q_real_logits = q_head(real_features, training=True)
        q_fake_logits = q_head(fake_features, training=True)
        q_real = losses.ce(labels, q_real_logits)
        q_fake = losses.ce(fake_labels, q_fake_logits)
        q_loss = q_real + q_fake
        # What the trunk and Q head learn from: without q_learns_from_fakes, the real batch only.
        q_learned = q_loss if preset.q_learns_from_fakes else q_real
    q_grads = tape.gradient(q_learned, trunk.trainable_variables + q_head.trainable_variables)
    if preset.g_learns_from_q:
        q_grads += tape.gradient(q_loss, g_variables)
    del tape

    apply(g_adam, g_grads, g_variables)
    apply(q_adam, q_grads, q_variables)
    accuracies = (_accuracy(labels, q_real_logits), _accuracy(fake_labels, q_fake_logits))
    return [d_loss, g_loss, q_loss, *accuracies], (d_adam, g_adam, q_adam)


# -- the textbook step on JAX --------------------------------------------------------------------------


def _textbook_jax(models, preset, batch, jit=JIT):
    """One textbook step on the models' values (stateless_call, jax.value_and_grad, stateless_apply),
    compiled whole as the JAX step is (`jit`), written back into the Keras models' variables; returns
    the losses (LOSS_METRICS' order) and the optimizers."""
    import jax

    adams = dict(zip(OPTIMIZER_NAMES, _adams(preset)))
    trained = _trained(models, preset)
    for name, adam in adams.items():
        adam.build([v for model in trained[name] for v in model.trainable_variables])
    step = functools.partial(_textbook_jax_step, models, preset, adams)
    values = (
        {model.name: [v.value for v in model.trainable_variables] for model in models},
        {model.name: [v.value for v in model.non_trainable_variables] for model in models},
        {name: [v.value for v in adam.variables] for name, adam in adams.items()},
    )
    weights, state, adam_state, losses_ = (jax.jit(step) if jit else step)(*values, batch)
    for model in models:
        for variable, value in zip(model.trainable_variables, weights[model.name]):
            variable.assign(value)
        for variable, value in zip(model.non_trainable_variables, state[model.name]):
            variable.assign(value)
    for name, adam in adams.items():
        for variable, value in zip(adam.variables, adam_state[name]):
            variable.assign(value)
    return losses_, tuple(adams.values())


def _textbook_jax_step(models, preset, adams, weights, state, adam_state, batch):
    """The textbook step as a function of arrays: ({model name: trainable values}, {model name:
    non-trainable values}, {optimizer name: its variables' values}, the batch) -> the same three after
    the step, and the losses."""
    import jax
    import jax.numpy as jnp

    generator, trunk, d_head, q_head = models
    trained = _trained(models, preset)
    weights, state, adam_state = dict(weights), dict(state), dict(adam_state)
    images, labels, z, fake_labels = batch
    real = _augmented(jnp.asarray(images, jnp.float32) / 255.0, augment.REAL, preset)

    def run(model, trainable, non_trainable, inputs):
        """(outputs, the model's new state) in training mode."""
        return model.stateless_call(trainable, non_trainable, inputs, training=True)

    def generated(g_weights):
        fake, g_state = run(generator, g_weights, state["generator"], [z, fake_labels])
        return _augmented(fake, augment.FAKE, preset), g_state

    def discriminator(trunk_state, images, classes):
        features, _ = run(trunk, weights["trunk"], trunk_state, images)
        inputs = d_head_inputs(d_head, features, classes)
        return run(d_head, weights["d_head"], state["d_head"], inputs)[0]

    def apply(name, grads):
        values = [w for model in trained[name] for w in weights[model.name]]
        values, adam_state[name] = adams[name].stateless_apply(adam_state[name], grads, values)
        for model in trained[name]:
            count = len(weights[model.name])
            weights[model.name], values = values[:count], values[count:]

    # 1. D. This G forward moves G's batch-norm statistics (G's later forwards drop theirs); D's pass
    #    moves the trunk's statistics and spectral-norm vectors, on the real batch and then the fake one.
    fake, state["generator"] = generated(weights["generator"])

    def d_loss_fn(trunk_weights, head_weights):
        trunk_state, head_state, logits = state["trunk"], state["d_head"], []
        for x, classes in ((real, labels), (fake, fake_labels)):
            features, trunk_state = run(trunk, trunk_weights, trunk_state, x)
            inputs = d_head_inputs(d_head, features, classes)
            logit, head_state = run(d_head, head_weights, head_state, inputs)
            logits.append(logit)
        return losses.d_adversarial(preset.loss, *logits), (trunk_state, head_state)

    (d_loss, (state["trunk"], state["d_head"])), d_grads = jax.value_and_grad(
        d_loss_fn, argnums=(0, 1), has_aux=True
    )(weights["trunk"], weights["d_head"])
    apply("d", d_grads[0] + d_grads[1])

    # 2. G through the updated D, a forward of its own; every state it moves is dropped.
    def g_loss_fn(g_weights):
        d_fake = discriminator(state["trunk"], generated(g_weights)[0], fake_labels)
        return losses.g_adversarial(preset.loss, d_fake)

    g_loss, g_grads = jax.value_and_grad(g_loss_fn)(weights["generator"])

    #    Q through the updated trunk, a forward of its own: G's and the trunk's states dropped (each trunk
    #    call from the state D's pass left); the Q head's statistics move, real batch then fake.
    def q_loss_fn(trunk_weights, head_weights, g_weights):
        real_features, _ = run(trunk, trunk_weights, state["trunk"], real)
        fake_features, _ = run(trunk, trunk_weights, state["trunk"], generated(g_weights)[0])
        real_logits, head_state = run(q_head, head_weights, state["q_head"], real_features)
        fake_logits, head_state = run(q_head, head_weights, head_state, fake_features)
        q_real, q_fake = losses.ce(labels, real_logits), losses.ce(fake_labels, fake_logits)
        accuracies = (_accuracy(labels, real_logits), _accuracy(fake_labels, fake_logits))
        # What the trunk and Q head learn from: without q_learns_from_fakes, the real batch only.
        learned = q_real + q_fake if preset.q_learns_from_fakes else q_real
        return learned, (q_real + q_fake, head_state, accuracies)

    q_weights = (weights["trunk"], weights["q_head"], weights["generator"])
    (_, (q_loss, state["q_head"], accuracies)), q_grads = jax.value_and_grad(
        q_loss_fn, argnums=(0, 1), has_aux=True
    )(*q_weights)
    q_grads = q_grads[0] + q_grads[1]
    if preset.g_learns_from_q:
        q_grads += jax.grad(lambda g: q_loss_fn(*q_weights[:2], g)[1][0])(weights["generator"])

    apply("g", g_grads)
    apply("q", q_grads)
    return weights, state, adam_state, [d_loss, g_loss, q_loss, *accuracies]


TEXTBOOK = {"tensorflow": _textbook_tensorflow, "jax": _textbook_jax}


# -- both steps, once per case -------------------------------------------------------------------------


@contextlib.contextmanager
def _as_the_textbook_runs():
    """TensorFlow: the step's tf.functions run eagerly, op by op, as the textbook does (built with
    jit=False, so no XLA either). JAX: nothing to change; both are jitted."""
    if BACKEND != "tensorflow":
        yield
        return
    import tensorflow as tf

    tf.config.run_functions_eagerly(True)
    try:
        yield
    finally:
        tf.config.run_functions_eagerly(False)


@dataclasses.dataclass
class Steps:
    """One step of each from the same weights and batch: values are {model name: [values in
    model.variables order]}; losses in LOSS_METRICS' order."""

    preset: presets.Preset
    models: networks.ACGANModels  # the real step's (for the variables' paths and kinds)
    initial: dict
    real: dict
    real_losses: list
    real_trained: dict  # {optimizer name: ["model/variable path" of each variable it trains]}
    real_optimizers: tuple
    textbook: dict
    textbook_losses: list
    textbook_trained: dict
    textbook_optimizers: tuple


def _names(models, variables):
    """["model/variable path", ...] for `variables`, variables of `models`."""
    owner = {id(v): model.name for model in models for v in model.variables}
    return [f"{owner[id(v)]}/{v.path}" for v in variables]


@functools.lru_cache(maxsize=None)
def _steps(case):
    preset = CASES[case]
    batch = _batch(preset)
    with precision.policy_scope("float32"):
        models = _models(preset)
        initial = _values(models)
        step = build_step(preset, BACKEND, models, NUM_CLASSES, jit=JIT)
        if BACKEND == "tensorflow":  # as the training loop feeds it: tensors
            import tensorflow as tf

            inputs = [tf.constant(x) for x in batch]
        else:
            inputs = batch
        with _as_the_textbook_runs():
            real_losses = np.asarray(step.train_step(*inputs).vector)[: len(LOSS_METRICS)]
        step.sync_variables()
        textbook_models = _models(preset, initial)
        textbook_losses, textbook_optimizers = TEXTBOOK[BACKEND](textbook_models, preset, batch)
    return Steps(
        preset=preset,
        models=models,
        initial=initial,
        real=_values(models),
        real_losses=real_losses.tolist(),
        real_trained={
            name: _names(models, variables)
            for name, variables in zip(
                OPTIMIZER_NAMES, (step.d_variables, step.g_variables, step.q_variables)
            )
        },
        real_optimizers=tuple(step.optimizer(name) for name in OPTIMIZER_NAMES),
        textbook=_values(textbook_models),
        textbook_losses=[float(x) for x in textbook_losses],
        textbook_trained={
            name: _names(textbook_models, [v for m in trained for v in m.trainable_variables])
            for name, trained in _trained(textbook_models, preset).items()
        },
        textbook_optimizers=textbook_optimizers,
    )


def _step_sizes(preset):
    """{model name: the largest learning rate of the optimizers that train it}: one Adam step's size."""
    rates = dict(zip(OPTIMIZER_NAMES, preset.learning_rates))
    return {
        "generator": max(rates["g"], rates["q"] if preset.g_learns_from_q else 0.0),
        "trunk": max(rates["d"], rates["q"]),
        "d_head": rates["d"],
        "q_head": rates["q"],
    }


# -- the tests -----------------------------------------------------------------------------------------


@pytest.mark.slow
# Keras's get_config reads the learning rate with np.array(variable), which numpy 2 warns about on JAX.
@pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")
@pytest.mark.parametrize("case", list(CASES))
def test_each_optimizer_is_the_textbooks_adam_on_the_same_weights(case):
    """Plain Adam (no loss scaling in float32) at the preset's rates, scale 1, beta_1, Keras's other
    defaults; each training the same variables in the same order, G in Q's only with g_learns_from_q."""
    steps = _steps(case)
    assert steps.real_trained == steps.textbook_trained
    assert any(name.startswith("generator/") for name in steps.real_trained["q"]) == (
        steps.preset.g_learns_from_q
    )
    for mine, textbook in zip(steps.real_optimizers, steps.textbook_optimizers):
        assert not precision.is_loss_scaled(mine)
        mine, textbook = mine.get_config(), textbook.get_config()
        assert {k: v for k, v in mine.items() if k != "name"} == {
            k: v for k, v in textbook.items() if k != "name"
        }


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_one_step_gives_the_textbook_steps_losses(case):
    steps = _steps(case)
    np.testing.assert_allclose(steps.real_losses, steps.textbook_losses, rtol=LOSS_RTOL, atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_one_step_gives_the_textbook_steps_weights(case):
    """Every trainable weight within STEP_TOLERANCE of one Adam step; and each model's moved by about a
    step, so the comparison is of two updates, not of two copies of the initial weights."""
    steps = _steps(case)
    sizes = _step_sizes(steps.preset)
    for model in steps.models:
        atol = STEP_TOLERANCE * sizes[model.name]
        trainable = {id(v) for v in model.trainable_variables}
        moved = 0.0
        for i, variable in enumerate(model.variables):
            if id(variable) not in trainable:
                continue
            got, want = steps.real[model.name][i], steps.textbook[model.name][i]
            np.testing.assert_allclose(
                got, want, rtol=WEIGHT_RTOL, atol=atol, err_msg=variable.path
            )
            moved = max(moved, float(np.abs(want - steps.initial[model.name][i]).max()))
        assert moved > 0.5 * sizes[model.name], (model.name, moved)
    assert [model.name for model in steps.models] == list(MODEL_NAMES)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_one_step_moves_the_textbook_steps_statistics_and_spectral_norm_vectors(case):
    """The non-trainable variables: G's batch-norm statistics moved by its one kept forward, the trunk's
    statistics (reference) or spectral-norm vectors (acgan_cifar) by D's pass, the Q head's statistics
    (reference) by Q's; each moved, and to the same values."""
    steps = _steps(case)
    compared = 0
    for model in steps.models:
        trainable = {id(v) for v in model.trainable_variables}
        for i, variable in enumerate(model.variables):
            if id(variable) in trainable:
                continue
            got, want = steps.real[model.name][i], steps.textbook[model.name][i]
            np.testing.assert_allclose(
                got, want, rtol=STATE_RTOL, atol=STATE_ATOL, err_msg=variable.path
            )
            assert not np.array_equal(want, steps.initial[model.name][i]), variable.path
            compared += 1
    # reference: G's 3 batch norms, the trunk's 2, the Q head's 1; acgan_cifar: G's 2, 6 convolutions' u
    assert compared == {"reference": 12, "acgan_cifar": 10}[steps.preset.name]
