"""Judging a GAN's samples: `evaluate_gan` scores a generator against real held-out images with the
judge (no file I/O, cheap enough for --eval_every); `TrainingEvaluator` does so during training, and
`scalars` names what TensorBoard shows of a result. A run folder is judged by run_evaluation.py.

Importing it loads Keras (the judge, the models, sampling): its callers choose the backend first.
"""

import numpy as np

from acgan import data as data_lib
from acgan.measure import device
from acgan.model.networks import build_classifier, takes_labels
from acgan.quality import judge as judge_lib
from acgan.quality import prdc
from acgan.quality.metrics import (
    class_counts,
    classifier_score,
    conditional_accuracy,
    frechet_distance_of,
    kernel_distance,
    per_class_frechet,
    per_class_subset,
    real_subset,
)
from acgan.training import sampling


def sample_inputs(num_classes, noise_dim, num_samples, seed=0):
    """Noise uniform in [-1, 1] and labels cycling through the classes (balanced to within one)."""
    rng = np.random.default_rng([seed, 2])
    labels = (np.arange(num_samples) % num_classes).astype(np.int32)
    z = rng.uniform(-1.0, 1.0, (num_samples, noise_dim)).astype(np.float32)
    return z, labels


def q_accuracy(classifier, images, labels, class_names, batch=500):
    """The GAN's own Q as a classifier (networks.build_classifier) on uint8 [N, H, W, C] images:
    (overall, per class by name) accuracy against `labels`, as conditional_accuracy computes it."""
    probs = [
        np.asarray(classifier(images[i : i + batch].astype(np.float32) / 255.0, training=False))
        for i in range(0, len(images), batch)
    ]
    overall, per_class = conditional_accuracy(np.concatenate(probs), labels)
    return overall, dict(zip(class_names, per_class))


def d_class_margins(models, images, labels, class_names, batch=500):
    """How well D's class term tells each class's real images from the other classes' under that class's
    label, as result entries; none when D's head takes no labels (the reference model's).

    D's logit for every real image under every label, averaged over the real images of each class: the
    matrix M[c, k] (images of class c, label k). Label k's margin is M[k, k] minus the largest M[c, k]
    (c != k), and `nearest` is that c. A projection D (acgan_cifar) is where G learns its classes from:
    G asked for class k is pushed towards what D scores highest under label k, so where k's margin is
    near zero or below, the real images of `nearest` please D under label k as much as k's own do, and G
    gets no push to draw the one rather than the other. (Across a row, D's logit moves with the label for
    every image alike, which G, given its label, cannot use; the columns are what G sees.) The images go
    through D's trunk in class order, as in training (its minibatch-spread channel looks at groups of
    consecutive images), in inference mode. The entries: d_class_margin_per_class (by class name),
    d_class_nearest (the name of `nearest`) and d_class_margin_mean (over the classes); None for a class
    with no image.
    """
    if not takes_labels(models.d_head):
        return {}
    names = list(class_names)
    num_classes = len(names)
    order = np.argsort(labels, kind="stable")
    images, labels = images[order], np.asarray(labels)[order]
    logits = []  # [N, K]: every image under every label
    for i in range(0, len(images), batch):
        # as the head's float32 island takes them (from bfloat16 too)
        features = np.asarray(
            models.trunk(images[i : i + batch].astype(np.float32) / 255.0, training=False),
            np.float32,
        )
        n = len(features)
        logits.append(
            np.stack(
                [
                    np.asarray(
                        models.d_head([features, np.full(n, k, np.int32)], training=False),
                        np.float64,
                    ).reshape(n)
                    for k in range(num_classes)
                ],
                axis=1,
            )
        )
    logits = np.concatenate(logits)
    present = np.array([np.any(labels == c) for c in range(num_classes)])
    means = np.array(
        [
            logits[labels == c].mean(axis=0) if present[c] else np.full(num_classes, np.nan)
            for c in range(num_classes)
        ]
    )  # M[c, k]
    # M[c, k] of the other classes that have images, under each label k
    rivals = np.where(present[:, None] & ~np.eye(num_classes, dtype=bool), means, -np.inf)
    nearest = np.where(present & (present.sum() > 1), rivals.argmax(axis=0), -1)
    margins = np.where(nearest >= 0, np.diag(means) - rivals.max(axis=0), np.nan)
    return {
        "d_class_margin_per_class": {
            name: None if np.isnan(m) else float(m) for name, m in zip(names, margins)
        },
        "d_class_nearest": {name: names[k] if k >= 0 else None for name, k in zip(names, nearest)},
        "d_class_margin_mean": float(np.nanmean(margins)) if np.any(~np.isnan(margins)) else None,
    }


def evaluate_gan(trainer, test_set, judge, num_samples=1000, seed=0, with_q=True, fake=None):
    """Scores `trainer` against real held-out images; pure of file I/O, cheap enough to call during training.

    trainer: an acgan.step.tf_step.TensorFlowStep; test_set: the real TEST ImageSet; judge: an
    acgan.quality.judge.Judge for the same dataset. Generates num_samples class-balanced samples from noise fixed by
    `seed`, and compares them with min(num_samples, len(test_set)) real test images (a fixed subset; the judge
    memoises their features, so repeated calls only pay for the generated side). `fake`: those samples, when the
    caller already generated them (the same `sample_inputs`), to judge them again without generating again.
    Returns a JSON-ready dict.
    """
    num_classes = test_set.num_classes
    z, labels = sample_inputs(num_classes, trainer.noise_dim, num_samples, seed)
    if fake is None:
        fake = sampling.generate_images(trainer, z, labels)
    fake_features, fake_probs = judge.predict(fake)
    real_features, real_probs, real_labels = judge.real_reference(test_set, num_samples, seed)
    overall, per_class = conditional_accuracy(fake_probs, labels)
    class_fd, class_fd_mean = per_class_frechet(
        real_features, real_labels, fake_features, labels, num_classes
    )
    result = {
        "num_generated": int(num_samples),
        "num_real": int(len(real_labels)),
        "seed": int(seed),
        "num_classes": int(num_classes),
        "chance": 1.0 / num_classes,
        "conditional_accuracy": overall,
        "conditional_accuracy_per_class": dict(zip(test_set.class_names, per_class)),
        "frechet_distance": frechet_distance_of(real_features, fake_features),
        # KID: unbiased, so comparable across sample counts where the Fréchet distance is not.
        "kernel_distance": kernel_distance(real_features, fake_features, seed=seed),
        # Intra-class: each class's real test images against the samples generated for that class.
        "frechet_distance_per_class": dict(zip(test_set.class_names, class_fd)),
        "frechet_distance_class_mean": class_fd_mean,
        # Precision, recall, density and coverage in the same features, overall and per class likewise.
        **prdc.measure(
            real_features, real_labels, fake_features, fake_features, labels, test_set.class_names
        ),
        "num_real_per_class": class_counts(real_labels, num_classes).tolist(),
        "num_generated_per_class": class_counts(labels, num_classes).tolist(),
        "classifier_score": classifier_score(fake_probs),
        # The same metrics on the real held-out images: the ceiling a perfect generator would reach.
        "real_conditional_accuracy": conditional_accuracy(real_probs, real_labels)[0],
        "real_classifier_score": classifier_score(real_probs),
        "judge_test_accuracy": judge.info.get("test_accuracy"),
    }
    if with_q:
        # The GAN's own Q on the real test images, and on the samples: does Q name the class G was asked
        # for? G is trained to make Q say yes, so Q far above the judge on the samples means G found
        # images Q accepts that the real class does not look like (AC-GAN's weak spot).
        classifier = build_classifier(trainer.models)  # once, for both image sets
        images, q_labels = real_subset(test_set, num_samples, seed)
        result["q_accuracy_real"], result["q_accuracy_real_per_class"] = q_accuracy(
            classifier, images, q_labels, test_set.class_names
        )
        result["q_accuracy_generated"], result["q_accuracy_generated_per_class"] = q_accuracy(
            classifier, fake, labels, test_set.class_names
        )
        result.update(d_class_margins(trainer.models, images, q_labels, test_set.class_names))
    return result


def real_reference(judge, test_set, train_set, num_samples, seed=0):
    """The Fréchet distance (and precision, recall, density and coverage) between real and real images at
    the sizes of a generated-vs-real comparison.

    The real side of evaluate_gan (min(num_samples, len(test_set)) test images, the same subset) against
    num_samples real TRAIN images in place of the generated ones (a fixed subset; all of the train split
    when it is smaller), in the same judge features: what a generator drawing exactly the data's
    distribution would score, finite samples being the only difference. The floor under every distance.
    Per class likewise: each class's real test images (the same subset) against as many real train images
    of that class as evaluate_gan generates for it (class_counts of sample_inputs' labels).
    """
    num_classes = test_set.num_classes
    real_features, _, real_labels = judge.real_reference(test_set, num_samples, seed)
    train_images, _ = real_subset(train_set, num_samples, seed)
    train_features, _ = judge.predict(train_images)
    _, generated_labels = sample_inputs(num_classes, 1, num_samples, seed)
    class_images, class_labels = per_class_subset(
        train_set, class_counts(generated_labels, num_classes), seed
    )
    class_features, _ = judge.predict(class_images)
    class_fd, class_fd_mean = per_class_frechet(
        real_features, real_labels, class_features, class_labels, num_classes
    )
    return {
        "frechet_distance": frechet_distance_of(real_features, train_features),
        "kernel_distance": kernel_distance(real_features, train_features, seed=seed),
        "num_real": int(len(real_labels)),
        "num_train": int(len(train_images)),
        "frechet_distance_per_class": dict(zip(test_set.class_names, class_fd)),
        "frechet_distance_class_mean": class_fd_mean,
        **prdc.measure(
            real_features,
            real_labels,
            train_features,
            class_features,
            class_labels,
            test_set.class_names,
        ),
        "num_real_per_class": class_counts(real_labels, num_classes).tolist(),
        "num_train_per_class": class_counts(class_labels, num_classes).tolist(),
        "what": "real test images vs real train images, judge features",
    }


def load_splits(config, data_dir=None):
    """The (test, train) splits of a run's data, as it selected them (classes, max_per_class)."""
    return [
        data_lib.load_dataset(
            config.dataset,
            split=split,
            data_dir=data_dir or config.data_dir,
            classes=config.classes,
            max_per_class=config.max_per_class,
        )
        for split in ("test", "train")
    ]


class TrainingEvaluator:
    """Judges the generator every --eval_every steps of a training run against the real test split."""

    def __init__(self, config):
        self.samples = config.eval_samples
        self.test_set, train_set = load_splits(config)
        self.judge = judge_lib.load_or_train(
            config.dataset,
            config.data_dir,
            config.classes,
            config.max_per_class,
            test_set=self.test_set,
        )
        # The real-vs-real references at this evaluation's sizes, once: every evaluation prints beside them.
        self.reference = real_reference(self.judge, self.test_set, train_set, self.samples)
        self.last = None
        device.reset_peak_memory()  # the judge may just have trained on this device: its peak is not the run's

    def evaluate(self, trainer, step, writer):
        """Scores `trainer`, logs the scalars to `writer` (a tensorboard.SummaryWriter); the result is kept in `last`.
        A step that samples from G's moving average is scored on it, and on G's own weights too (in
        last["no_ema"], the scalars under quality_no_ema/): what the average buys, as the run goes."""
        trainer.sync_variables()  # Q is called as a Keras model here; on JAX the step's state is elsewhere
        self.last = dict(
            evaluate_gan(trainer, self.test_set, self.judge, self.samples),
            step=step,
            real_reference=self.reference,
        )
        writer.scalars(scalars(self.last), step)
        if trainer.samples_from_ema:
            trainer.samples_from_ema = False
            try:
                raw = evaluate_gan(trainer, self.test_set, self.judge, self.samples, with_q=False)
            finally:
                trainer.samples_from_ema = True
            self.last["no_ema"] = raw
            writer.scalars(
                {
                    tag.replace("quality/", "quality_no_ema/", 1): value
                    for tag, value in scalars(raw).items()
                },
                step,
            )


# TensorBoard's quality/TAG of each number a result holds at PATH (dots: inside an entry); a number per
# class (a dict by class name) is logged as quality/TAG/CLASS. A number the result lacks, or holds as
# None (a class the judge saw no samples of), is not logged.
SCALAR_TAGS = (
    *(
        (key, key)
        for key in (
            "conditional_accuracy",
            "frechet_distance",
            "frechet_distance_class_mean",
            "classifier_score",
            "q_accuracy_real",
            "q_accuracy_generated",
            "d_class_margin_mean",
            *prdc.MEANS,
        )
    ),
    ("conditional_accuracy_per_class", "conditional_accuracy_class"),
    ("frechet_distance_per_class", "frechet_distance_class"),
    *((f"{name}_per_class", f"{name}_class") for name in prdc.NAMES),
    ("d_class_margin_per_class", "d_class_margin_class"),
    ("classification_accuracy_score.accuracy", "classification_accuracy_score"),
    ("classification_accuracy_score.per_class", "classification_accuracy_score_class"),
    ("kernel_distance.mean", "kernel_distance"),
    ("inception.fid", "inception_fid"),
    ("inception.inception_score", "inception_score"),
    ("inception.kernel_distance.mean", "inception_kernel_distance"),
    ("inception.fid_class_mean", "inception_fid_class_mean"),
    ("inception.fid_per_class", "inception_fid_class"),
)


def scalars(result):
    """The TensorBoard scalars of an evaluation (also what the trainer logs every --eval_every steps)."""
    out = {}
    for path, tag in SCALAR_TAGS:
        value = result
        for key in path.split("."):
            value = (value or {}).get(key)
        if isinstance(value, dict):
            out.update({f"quality/{tag}/{k}": v for k, v in value.items() if v is not None})
        elif value is not None:
            out[f"quality/{tag}"] = value
    return out
