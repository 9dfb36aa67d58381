"""Sample-quality metrics in pure numpy (no TensorFlow, no Keras): conditional accuracy, classifier
score, the Fréchet and kernel distances between two feature sets, and the fixed subset of real images
they are measured against."""

import numpy as np


def conditional_accuracy(probs, labels):
    """(overall, per-class list) fraction of samples whose argmax class is the class they were made for.

    probs [N, K], labels int [N]: one entry per class of probs. A class with no samples gets None.
    """
    hits = np.argmax(probs, axis=-1) == labels
    per_class = [
        float(np.mean(hits[labels == c])) if np.any(labels == c) else None
        for c in range(probs.shape[-1])
    ]
    return float(np.mean(hits)), per_class


def classifier_score(probs, eps=1e-12):
    """exp(mean_x KL(p(y|x) || p(y))), p(y) the mean prediction: 1 (uninformative) to K (confident, balanced).

    The "Inception score" formula, computed with the judge instead of Inception-v3.
    """
    p = np.asarray(probs, np.float64)
    marginal = p.mean(axis=0, keepdims=True)
    kl = np.sum(p * (np.log(p + eps) - np.log(marginal + eps)), axis=-1)
    return float(np.exp(np.mean(kl)))


def inception_score(probs, splits=10):
    """(mean, standard deviation) of classifier_score over `splits` consecutive, near-equal parts of probs
    [N, K], in order, as the improved-GAN code splits them (population standard deviation)."""
    n = len(probs)
    if n < splits:
        raise ValueError(f"{n} samples cannot make {splits} splits")
    scores = [
        classifier_score(probs[i * n // splits : (i + 1) * n // splits]) for i in range(splits)
    ]
    return float(np.mean(scores)), float(np.std(scores))


def moments(features, chunk=1000):
    """(mean [F], covariance [F, F]) of features [N, F] in float64, `chunk` rows at a time (batches merged
    exactly: Chan et al.'s pairwise update), so 50,000 2048-d features need no [N, F] float64 copy."""
    count, mean, scatter = 0, 0.0, 0.0  # the first chunk merges into nothing exactly
    for i in range(0, len(features), chunk):
        x = np.asarray(features[i : i + chunk], np.float64)
        part_mean = x.mean(axis=0)
        centred = x - part_mean
        total, delta = count + len(x), part_mean - mean
        scatter = scatter + centred.T @ centred + np.outer(delta, delta) * (count * len(x) / total)
        mean = mean + delta * (len(x) / total)
        count = total
    return mean, scatter / (count - 1)  # np.cov's normalisation


def statistics(features):
    """(mean [F], covariance [F, F]) of features [N, F], in float64."""
    x = np.asarray(features, np.float64)
    return x.mean(axis=0), np.cov(x, rowvar=False)


def _sqrt_psd(matrix):
    """Square root of a symmetric positive semi-definite matrix; tiny negative eigenvalues become 0."""
    values, vectors = np.linalg.eigh((matrix + matrix.T) / 2.0)
    return (vectors * np.sqrt(np.clip(values, 0.0, None))) @ vectors.T


def frechet_distance(mu1, sigma1, mu2, sigma2):
    """Fréchet distance between N(mu1, sigma1) and N(mu2, sigma2).

    |mu1 - mu2|^2 + tr(S1) + tr(S2) - 2 tr(sqrt(sqrt(S1) S2 sqrt(S1))); the symmetric form keeps the
    inner matrix symmetric PSD, so eigh gives its root stably (no scipy, no complex parts).
    """
    mu1, mu2 = np.asarray(mu1, np.float64), np.asarray(mu2, np.float64)
    s1, s2 = (
        np.atleast_2d(np.asarray(sigma1, np.float64)),
        np.atleast_2d(np.asarray(sigma2, np.float64)),
    )
    root1 = _sqrt_psd(s1)
    inner = root1 @ s2 @ root1
    values = np.linalg.eigvalsh((inner + inner.T) / 2.0)
    trace_sqrt = np.sum(np.sqrt(np.clip(values, 0.0, None)))
    distance = np.sum((mu1 - mu2) ** 2) + np.trace(s1) + np.trace(s2) - 2.0 * trace_sqrt
    # rounding can leave a tiny negative for identical distributions
    return float(max(distance, 0.0))


def frechet_distance_of(features1, features2):
    return frechet_distance(*statistics(features1), *statistics(features2))


# The kernel distance's subsets, as torch-fidelity draws them (kid_subsets, kid_subset_size).
KID_SUBSETS, KID_SUBSET_SIZE = 100, 1000


def kernel_distance(features1, features2, subsets=KID_SUBSETS, subset_size=KID_SUBSET_SIZE, seed=0):
    """The kernel inception distance (Bińkowski et al. 2018, "Demystifying MMD GANs") in any features: the
    unbiased estimate of the squared MMD under the cubic polynomial kernel k(x, y) = (x.y / d + 1)^3, over
    `subsets` pairs of random subsets of min(subset_size, n1, n2) rows each (drawn without replacement),
    as torch-fidelity computes it (one subset where both sets have no more rows than that). Unbiased, so it
    can fall below 0 and does not grow as samples shrink, unlike the Fréchet distance. Returns {"mean",
    "std" (over the subsets), "subsets", "subset_size"}."""
    # float64 a subset at a time: 50,000 Inception features would take 820 MB each as float64
    m = min(subset_size, len(features1), len(features2))
    if m < 2:
        raise ValueError(
            f"the kernel distance needs 2 or more features a side, got {len(features1)} and {len(features2)}"
        )
    if (
        m == len(features1) == len(features2)
    ):  # every subset is the whole of both sets, in another order: one will do
        subsets = 1
    dims = features1.shape[1]
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(subsets):
        x = features1[rng.choice(len(features1), m, replace=False)].astype(np.float64)
        y = features2[rng.choice(len(features2), m, replace=False)].astype(np.float64)
        k_xx, k_yy, k_xy = ((a @ b.T / dims + 1) ** 3 for a, b in ((x, x), (y, y), (x, y)))
        within = (k_xx.sum() - np.trace(k_xx) + k_yy.sum() - np.trace(k_yy)) / (m * (m - 1))
        values.append(within - 2 * k_xy.mean())
    return {
        "mean": float(np.mean(values)),
        "std": float(np.std(values)),
        "subsets": subsets,
        "subset_size": m,
    }


def real_subset(test_set, num_samples, seed=0):
    """(uint8 images, labels): all of the held-out set when it has <= num_samples images, else a fixed
    random subset of num_samples (same seed, same subset), so every comparison sees the same real images."""
    n = len(test_set)
    if n <= num_samples:
        return test_set.images, test_set.labels
    idx = np.sort(np.random.default_rng([seed, 1]).choice(n, num_samples, replace=False))
    return test_set.images[idx], test_set.labels[idx]


def per_class_frechet(features1, labels1, features2, labels2, num_classes):
    """Intra-class Fréchet distances (StudioGAN's "intra-FID" idea, in whatever features are given):
    for each class c, the distance between features1[labels1 == c] and features2[labels2 == c].

    Returns (list of K distances, None where either side has fewer than 2 samples of the class; their
    mean over the classes that have one, or None). A generator that collapses one class to a single
    image scores a large distance for that class alone, which the overall distance dilutes K-fold.
    """
    out = []
    for c in range(
        num_classes
    ):  # one class's features at a time: 50,000 Inception features are 400 MB
        a, b = features1[labels1 == c], features2[labels2 == c]
        out.append(frechet_distance_of(a, b) if len(a) >= 2 and len(b) >= 2 else None)
    known = [d for d in out if d is not None]
    return out, (float(np.mean(known)) if known else None)


def class_counts(labels, num_classes):
    return np.bincount(np.asarray(labels, np.int64), minlength=num_classes)[:num_classes]


def per_class_subset(image_set, counts, seed=0):
    """(uint8 images, labels): counts[c] images of each class c of `image_set` (all of the class when it
    has fewer), a fixed random choice per (seed, class): the real side of a per-class reference drawn at
    the generated side's per-class sizes."""
    keep = []
    for c, n in enumerate(counts):
        idx = np.flatnonzero(image_set.labels == c)
        if n < len(idx):
            idx = np.sort(np.random.default_rng([seed, 3, c]).choice(idx, int(n), replace=False))
        keep.append(idx)
    idx = np.concatenate(keep) if keep else np.zeros(0, np.int64)
    return image_set.images[idx], image_set.labels[idx]
