"""Precision, recall, density and coverage of generated samples against real ones, in pure numpy.

Precision and recall as k-nearest-neighbour manifolds (Kynkäänniemi et al., "Improved Precision and
Recall Metric for Assessing Generative Models", NeurIPS 2019); density and coverage (Naeem et al.,
"Reliable Fidelity and Diversity Metrics for Generative Models", ICML 2020), computed as their reference
implementation (the `prdc` package) does. Every real image gets a ball reaching its k-th nearest other
real image, every sample a ball reaching its k-th nearest other sample; then

- precision: the fraction of samples inside at least one real ball (fidelity);
- recall: the fraction of real images inside at least one sample's ball (diversity);
- density: how many real balls each sample lies in, over k, averaged over the samples (about 1 when the
  samples are distributed like the real images; above 1 where they crowd the densest real regions);
- coverage: the fraction of real images whose own ball holds at least one sample (diversity that
  sample outliers cannot inflate).

"Inside" is strictly closer than the radius, as in `prdc`; a set of n features has a k-th neighbour
only when n > k, so a side with n <= k gives None (per class too: such a class is left out of the mean
over classes; k is never shrunk to fit, which would change what the number measures). The distances
are computed in row blocks of about CHUNK_ELEMENTS, so 10,000 x 10,000 features stay a few tens of MB.
"""

import numpy as np

NEAREST_K = 5  # the `prdc` reference's default and Naeem et al.'s recommendation
NAMES = ("precision", "recall", "density", "coverage")
# the numbers an evaluation holds of them: overall, and their means over the classes
MEANS = (*NAMES, *(f"{name}_class_mean" for name in NAMES))
CHUNK_ELEMENTS = 1 << 22  # distances held at once (32 MiB of float64)


def _squared_distance_blocks(a, b, chunk_elements=CHUNK_ELEMENTS):
    """(start, block) with block[i, j] = |a[start + i] - b[j]|^2, rows of `a` in blocks of about
    chunk_elements distances."""
    b_norms = np.einsum("ij,ij->i", b, b)
    rows = max(1, chunk_elements // max(1, len(b)))
    for start in range(0, len(a), rows):
        part = a[start : start + rows]
        block = part @ b.T
        block *= -2.0  # in place: one block in memory, not four
        block += np.einsum("ij,ij->i", part, part)[:, None]
        block += b_norms[None, :]
        yield start, np.maximum(block, 0.0, out=block)  # rounding can leave a tiny negative


def knn_radii(features, k=NEAREST_K, chunk_elements=CHUNK_ELEMENTS):
    """Squared distance from each of features [n, F] to its k-th nearest other point (n > k)."""
    x = np.asarray(features, np.float64)
    radii = np.empty(len(x))
    for start, block in _squared_distance_blocks(x, x, chunk_elements):
        # index 0: the point itself
        radii[start : start + len(block)] = np.partition(block, k, axis=1)[:, k]
    return radii


def prdc(real, fake, k=NEAREST_K, chunk_elements=CHUNK_ELEMENTS):
    """{precision, recall, density, coverage} of fake [M, F] against real [N, F], or None unless
    N > k and M > k."""
    real, fake = np.asarray(real, np.float64), np.asarray(fake, np.float64)
    if len(real) <= k or len(fake) <= k:
        return None
    # distances do not move; the |a|^2 + |b|^2 - 2ab expansion rounds less
    centre = real.mean(axis=0)
    real, fake = real - centre, fake - centre
    real_radii = knn_radii(real, k, chunk_elements)
    fake_radii = knn_radii(fake, k, chunk_elements)
    balls_holding = np.zeros(len(fake), np.int64)  # per sample: the real balls it lies in
    recalled = np.zeros(len(real), bool)
    covered = np.zeros(len(real), bool)
    for start, block in _squared_distance_blocks(real, fake, chunk_elements):
        radii = real_radii[start : start + len(block), None]
        balls_holding += np.sum(block < radii, axis=0)
        recalled[start : start + len(block)] = np.any(block < fake_radii[None, :], axis=1)
        covered[start : start + len(block)] = block.min(axis=1) < radii[:, 0]
    return {
        "precision": float(np.mean(balls_holding > 0)),
        "recall": float(np.mean(recalled)),
        "density": float(np.mean(balls_holding) / k),
        "coverage": float(np.mean(covered)),
    }


def class_mean(per_class):
    """The mean of each number over the classes that have one (None when none has)."""
    known = [m for m in per_class if m is not None]
    return {name: float(np.mean([m[name] for m in known])) for name in NAMES} if known else None


def entries(overall, per_class, class_names, k=NEAREST_K):
    """An evaluation's result entries: precision, recall, density and coverage overall (None where a side
    is too small), each per class by name, and each class mean; with the k they were measured at."""
    mean = class_mean(per_class) or {}
    out = {"prdc_nearest_k": int(k)}
    for name in NAMES:
        out[name] = (overall or {}).get(name)
        out[f"{name}_per_class"] = {c: (m or {}).get(name) for c, m in zip(class_names, per_class)}
        out[f"{name}_class_mean"] = mean.get(name)
    return out


def measure(real, real_labels, fake, class_fake, class_fake_labels, class_names, k=NEAREST_K):
    """entries() of `fake` against `real` overall, and per class of `class_fake` (labelled
    class_fake_labels) against the same class of `real`: an evaluation's generated samples (both the
    same set), or a real-vs-real reference's train images (the per-class side drawn at the generated
    side's per-class sizes). A class with k or fewer on a side has no numbers (None)."""
    per_class = [
        prdc(real[real_labels == c], class_fake[class_fake_labels == c], k)
        for c in range(len(class_names))
    ]
    return entries(prdc(real, fake, k), per_class, class_names, k)
