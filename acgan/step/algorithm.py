"""The AC-GAN iteration in the order the paper states it (Odena et al. 2017; keras-io's GAN train_steps
read the same way), with no backend in it: the one place that says what a step does. tf_step.py and
jax_step.py supply only what truly differs between TensorFlow and JAX (a `Backend`: where the weights
live, how a gradient is taken and applied, jit and sharding); both run `iteration`.

One iteration, on real images x with classes c, and noise z with the classes c' G is asked for:

    fake = augment(G(z, c'))                     G's one forward, kept for G's backward pass
    1. D:  L_D = adv_D(D(x, c), D(fake, c'))     fake a constant; D's optimizer: the trunk and the D head
    2. G:  L_G = adv_G(D(fake, c'))              through the freshly updated D
       Q:  L_Q = ce(c, Q(x)) + ce(c', Q(fake))   Q's optimizer: the trunk, the Q head (and G)
       G's gradients: dL_G/dfake and dL_Q/dfake, pulled back through G's one forward

D(images, classes) is the trunk and then the D head (class-conditional with acgan_cifar's projection
head); Q(images) the trunk and then the Q head. adv_D and adv_G are losses.py's (nonsaturating or
hinge), ce the cross-entropy. Each loss is scaled by its own optimizer's loss scale before its gradients
are taken (mixed_float16; a scale of 1 otherwise), and each optimizer unscales, skips a non-finite step
and moves its scale. The preset's switches: q_learns_from_fakes (False: ce(c', Q(fake)) moves no weight
of the trunk or Q head), g_learns_from_q (False: it reaches no weight of G, and Q's optimizer trains
the trunk and Q head only), augment (DiffAugment of every image D's trunk sees, x and fake alike).

After the iteration, `after_iteration` keeps the books the same way on every backend: the step
counter, each optimizer's skip streak, G's moving average (G-EMA) and the step's metric vector.

The fusions, kept because they pay on a GPU, each in one place:
- G runs once per iteration (`Backend.generator_forward`): D trains on its output with the gradient
  stopped, and G's and Q's losses reach G's weights as cotangents w.r.t. the fake images, pulled back
  through that forward. It saves a second G forward pass per step.
- G's and Q's gradients come from one pass through the trunk on each batch (`g_and_q_gradients`, over
  `Backend.gradients`): with q_learns_from_fakes and g_learns_from_q, Q's weight gradients and its
  cotangent come from one backward pass. On TensorFlow that is one persistent tape; on JAX, under jit,
  XLA merges the traced forwards of each target into one.
"""

import abc
from typing import Any, NamedTuple, Optional

from keras import ops

from acgan.model.networks import d_head_inputs
from acgan.step import augment as augment_lib
from acgan.step import losses


class Networks(abc.ABC):
    """The models as the losses call them, in training mode; each backend's `_call` says where their
    weights come from and which batch-norm statistics a call moves. `models`: {model name: model}."""

    @abc.abstractmethod
    def _call(self, name, inputs):
        """The model called `name` on `inputs`, in training mode."""

    def trunk(self, images):
        return self._call("trunk", images)

    def d_head(self, features, labels):  # D's real/fake logits (labels: acgan_cifar's projection)
        return self._call("d_head", d_head_inputs(self.models["d_head"], features, labels))

    def q_head(self, features):  # Q's class logits
        return self._call("q_head", features)


def d_loss(nets, loss, real, labels, fake, fake_labels):
    """L_D: D's loss on the real batch and on the fake one (the trunk sees the real batch first)."""
    d_real = nets.d_head(nets.trunk(real), labels)
    d_fake = nets.d_head(nets.trunk(fake), fake_labels)
    return losses.d_adversarial(loss, d_real, d_fake)


def g_loss(nets, loss, fake_features, fake_labels):
    """L_G, from the trunk's features of the fake batch."""
    return losses.g_adversarial(loss, nets.d_head(fake_features, fake_labels))


class QLosses(NamedTuple):
    """Q's class losses and accuracies on the real and the fake batch; L_Q = real + fake."""

    real: Any
    fake: Any
    accuracy_real: Any
    accuracy_fake: Any


def q_losses(nets, labels, real_features, fake_labels, fake_features):
    """Q's losses from the trunk's features of both batches (its head sees the real batch first)."""
    q_real = nets.q_head(real_features)
    q_fake = nets.q_head(fake_features)
    return QLosses(
        losses.ce(labels, q_real),
        losses.ce(fake_labels, q_fake),
        accuracy(labels, q_real),
        accuracy(fake_labels, q_fake),
    )


def accuracy(labels, logits):
    """The share of images whose largest logit is their label's."""
    predicted = ops.cast(ops.argmax(logits, axis=-1), "int32")
    return ops.mean(ops.cast(ops.equal(predicted, ops.cast(labels, "int32")), "float32"))


class GQGradients(NamedTuple):
    """Step 2's losses and accuracies, Q's weight gradients (the trunk's, then the Q head's) and the
    cotangents of L_G and L_Q w.r.t. the fake images; gradients and cotangents still loss-scaled."""

    g_loss: Any
    q_loss: Any
    q_accuracy_real: Any
    q_accuracy_fake: Any
    q_grads: list
    g_cotangent: Any
    q_cotangent: Optional[Any]  # None when G does not learn from Q


# The models whose weights D's loss and Q's loss train (StepBase.trained_models: Q's optimizer also
# trains G, through its cotangent, when G learns from Q).
D_MODELS = ("trunk", "d_head")
Q_MODELS = ("trunk", "q_head")


class Backend(abc.ABC):
    """The primitives a backend supplies to `iteration`. `preset` is the Preset it trains, `loss`,
    `augment` and `g_learns_from_q` are the preset's (StepBase sets them)."""

    preset: Any
    loss: str
    augment: Optional[tuple]
    g_learns_from_q: bool

    @abc.abstractmethod
    def augmented(self, images, step, salt):
        """`images` augmented with step `step`'s draws for `salt` (augment.REAL or augment.FAKE)."""

    @abc.abstractmethod
    def generator_forward(self, z, labels, step):
        """G's images as D sees them (augmented; the gradient stopped) and G's backward: a function from a
        cotangent w.r.t. those images to the gradients of G's trainable weights."""

    @abc.abstractmethod
    def share(self, value):
        """This replica's share of a batch mean (its mean / replicas), so the replicas' gradients sum to
        the global batch's; the value itself where one program sees the global batch."""

    @abc.abstractmethod
    def scaled(self, name, loss):
        """`loss` times optimizer `name`'s loss scale as it stands (mixed_float16; else the loss)."""

    @abc.abstractmethod
    def gradients(self, losses_fn, x, targets, moving):
        """`losses_fn(nets, x)` -> ({key: loss}, aux) run forward once, at the weights as they stand, and
        differentiated for each target (key, models, by_x): the gradients of losses[key] w.r.t. the
        trainable weights of `models` in order, and w.r.t. `x` when by_x (else None). The calls of the
        models named in `moving` move their batch-norm statistics; the others' updates are dropped.
        Returns ([(weight gradients, x's gradient) per target], aux)."""

    @abc.abstractmethod
    def apply(self, name, grads):
        """Optimizer `name` ("d", "g" or "q") applies `grads` to the variables it trains."""


def d_loss_and_gradients(backend, real, labels, fake, fake_labels):
    """Step 1: (L_D, its loss-scaled gradients for the trunk and the D head); the trunk's and the D
    head's statistics move here."""

    def losses_fn(nets, _):
        d = backend.share(d_loss(nets, backend.loss, real, labels, fake, fake_labels))
        return {"d": backend.scaled("d", d)}, d

    [(grads, _)], d = backend.gradients(losses_fn, None, [("d", D_MODELS, False)], D_MODELS)
    return ops.cast(d, "float32"), grads


def g_and_q_gradients(backend, real, labels, fake, fake_labels, q_from_fakes):
    """Step 2's GQGradients through D as it is now, from one trunk forward on each batch; only the Q
    head's statistics move (the trunk's moved in step 1). Q's weight gradients are L_Q's, or (q_from_fakes
    False) those of its real-batch term alone. With q_from_fakes and g_learns_from_q one backward pass
    gives Q's weight gradients and its cotangent."""

    def losses_fn(nets, fake):
        fake_features = nets.trunk(fake)
        real_features = nets.trunk(real)
        g = backend.share(g_loss(nets, backend.loss, fake_features, fake_labels))
        q = q_losses(nets, labels, real_features, fake_labels, fake_features)
        q_real = backend.share(q.real)
        q_loss = q_real + backend.share(q.fake)
        scaled = {"g": backend.scaled("g", g), "q": backend.scaled("q", q_loss)}
        if not q_from_fakes:  # the trunk and Q head then learn from the real batch alone
            scaled["q_real"] = backend.scaled("q", q_real)
        accuracies = backend.share(q.accuracy_real), backend.share(q.accuracy_fake)
        return scaled, (g, q_loss, *accuracies)

    fused = q_from_fakes and backend.g_learns_from_q
    targets = [("g", (), True), ("q" if q_from_fakes else "q_real", Q_MODELS, fused)]
    if (
        backend.g_learns_from_q and not fused
    ):  # L_Q reaches G; Q's weights learn from real images only
        targets.append(("q", (), True))
    results, (g, q_loss, accuracy_real, accuracy_fake) = backend.gradients(
        losses_fn, fake, targets, moving=("q_head",)
    )
    q_grads, q_cotangent = results[1]
    if len(results) > 2:
        q_cotangent = results[2][1]
    return GQGradients(
        g_loss=ops.cast(g, "float32"),
        q_loss=ops.cast(q_loss, "float32"),
        q_accuracy_real=accuracy_real,
        q_accuracy_fake=accuracy_fake,
        q_grads=list(q_grads),
        g_cotangent=results[0][1],
        q_cotangent=q_cotangent,
    )


def iteration(backend, real, labels, z, fake_labels, step):
    """One AC-GAN iteration on `backend`: real images in [0, 1], their int labels, G's noise and the labels
    G is asked for, and the step counter (the augmentation's draws). Returns (L_D, L_G, L_Q, Q's accuracy
    on the real batch, on the fake batch)."""
    fake, g_backward = backend.generator_forward(z, fake_labels, step)
    if backend.augment:
        real = backend.augmented(real, step, augment_lib.REAL)

    # 1. D on the real and the fake batch, G's output a constant.
    d, d_grads = d_loss_and_gradients(backend, real, labels, fake, fake_labels)
    backend.apply("d", d_grads)

    # 2. G and Q through the freshly updated D, from the same fake batch; G's gradients pulled back
    #    through its one forward.
    # What Q's weights learn from is the preset's: L_Q, or its real-batch term alone.
    gq = g_and_q_gradients(
        backend, real, labels, fake, fake_labels, q_from_fakes=backend.preset.q_learns_from_fakes
    )
    g_grads = g_backward(gq.g_cotangent)
    q_g_grads = g_backward(gq.q_cotangent) if backend.g_learns_from_q else []
    backend.apply("g", g_grads)
    backend.apply("q", list(gq.q_grads) + list(q_g_grads))
    return d, gq.g_loss, gq.q_loss, gq.q_accuracy_real, gq.q_accuracy_fake


class Bookkeeping(NamedTuple):
    """What a step keeps after its iteration (after_iteration): the step counter, each optimizer's skip
    streak, G's average (its weights, then its batch-norm statistics) and the metric vector."""

    step: Any
    skip_streak: Any
    g_ema: list
    metrics: Any


def after_iteration(
    losses, scales, step, iterations_before, iterations, skip_streak, ema, g_ema, g
):
    """The bookkeeping after `iteration`, in Keras ops, the same on every backend: the step counter moves;
    an optimizer whose iterations did not move (a loss-scale optimizer skips a non-finite step) lengthens
    its skip streak, any other's restarts; G's average `g_ema` moves toward G's weights and statistics `g`
    at the decay `ema` (0: none kept) ramped by ema_decay_at; and the metrics are one float32 vector in
    METRIC_NAMES order: `losses` (the iteration's, stacked), each optimizer's loss scale, its skipped steps
    so far (the step counter minus its iterations) and its skip streak."""
    streak = ops.where(
        ops.equal(iterations, iterations_before), skip_streak + 1, ops.zeros_like(skip_streak)
    )
    if ema:  # one elementwise update per weight, in float32 whatever the policy; XLA fuses them
        decay = ema_decay_at(ema, step)
        g_ema = [a * decay + ops.cast(w, "float32") * (1.0 - decay) for a, w in zip(g_ema, g)]
    step = step + 1
    skipped = ops.cast(step - iterations, "float32")
    metrics = ops.concatenate([losses, scales, skipped, ops.cast(streak, "float32")])
    return Bookkeeping(step, streak, g_ema, metrics)


# G-EMA's warm-up, TensorFlow's ExponentialMovingAverage's `num_updates` ramp: the decay at update t is
# min(decay, (1 + t) / (10 + t)), so the first steps' weights do not linger in a short run's average (a
# plain 0.999 leaves 37% of the initial weights in it after 1,000 steps). The ramp reaches 0.999 at about
# step 9,000; before that the average spans roughly the last tenth of the run.
def ema_decay_at(decay, step):
    """The average's decay for the update after `step` earlier ones (a scalar tensor)."""
    step = ops.cast(step, "float32")
    return ops.minimum(ops.cast(decay, "float32"), (1.0 + step) / (10.0 + step))
