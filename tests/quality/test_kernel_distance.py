"""The kernel distance (KID) against a brute-force reference on constructed cases, as prdc was checked."""

import itertools

import numpy as np
import pytest

from acgan.quality.metrics import kernel_distance


def _brute_force(x, y):
    """The unbiased squared MMD with k(a, b) = (a.b / d + 1)^3, term by term over every pair."""
    d = x.shape[1]

    def k(a, b):
        return (sum(p * q for p, q in zip(a, b)) / d + 1) ** 3

    m, n = len(x), len(y)
    xx = sum(k(x[i], x[j]) for i, j in itertools.permutations(range(m), 2)) / (m * (m - 1))
    yy = sum(k(y[i], y[j]) for i, j in itertools.permutations(range(n), 2)) / (n * (n - 1))
    xy = sum(k(a, b) for a in x for b in y) / (m * n)
    return xx + yy - 2 * xy


@pytest.mark.parametrize("seed", range(4))
def test_one_whole_subset_equals_the_brute_force_mmd(seed):
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(7, 3)), rng.normal(1.0, 2.0, size=(7, 3))
    # Subsets of all 7 rows would each be a permutation of both sets, with the same value: one is drawn.
    got = kernel_distance(x, y, subsets=5, subset_size=100, seed=seed)
    assert got["subset_size"] == 7 and got["subsets"] == 1 and got["std"] == 0
    assert got["mean"] == pytest.approx(_brute_force(x, y), rel=1e-12)


def test_the_mean_is_over_subsets_each_a_brute_force_mmd():
    rng = np.random.default_rng(7)
    x, y = rng.normal(size=(12, 4)), rng.normal(0.5, 1.0, size=(9, 4))
    got = kernel_distance(x, y, subsets=6, subset_size=5, seed=3)
    draw = np.random.default_rng(3)  # the same draws, in the same order
    values = []
    for _ in range(6):
        a, b = x[draw.choice(12, 5, replace=False)], y[draw.choice(9, 5, replace=False)]
        values.append(_brute_force(a, b))
    assert got["mean"] == pytest.approx(np.mean(values), rel=1e-12)
    assert got["std"] == pytest.approx(np.std(values), rel=1e-9)


def test_unbiased_near_zero_for_one_distribution_and_growing_with_a_shift():
    rng = np.random.default_rng(0)
    real = rng.normal(size=(400, 8))
    same = kernel_distance(real, rng.normal(size=(400, 8)), subsets=20, subset_size=200)
    near = kernel_distance(real, rng.normal(0.3, 1.0, size=(400, 8)), subsets=20, subset_size=200)
    far = kernel_distance(real, rng.normal(1.0, 1.0, size=(400, 8)), subsets=20, subset_size=200)
    assert abs(same["mean"]) < 3 * same["std"] + 1e-3  # an unbiased estimate of 0: either sign
    assert 0 < near["mean"] < far["mean"]


def test_fewer_than_two_features_a_side_is_refused():
    with pytest.raises(ValueError, match="2 or more features a side"):
        kernel_distance(np.zeros((1, 3)), np.zeros((5, 3)))
