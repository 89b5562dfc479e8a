"""Small-sample statistics for comparing arms over seeds: seeded, deterministic, numpy only.

Used by the SAPO table study (worker/research/study_analysis.py) and the coordinator's dashboard, so that each
quantity is computed one way everywhere.

* :func:`bootstrap_interval`: percentile bootstrap interval of a mean.
* :func:`paired_bootstrap_interval`: the same for the mean of paired differences a_i - b_i
  (seeds are resampled as pairs, so what the two arms share cancels).
* :func:`paired_ratio_interval`: percentile bootstrap interval of mean(a) / mean(b) - 1, the
  relative gain, with pairs resampled together.
* :func:`ratio_interval`: the same gain for two independent (unpaired) samples, each
  resampled on its own (e.g. swarm workers against isolated seeds: different agents).
* :func:`sign_flip_test`: the paired (sign-flip) permutation test, exact for small n.
* :func:`holm`: Holm's step-down adjustment of a family of p-values.

Every random draw comes from ``numpy.random.default_rng(seed)``, so the same data give the same
interval and p-value on every call.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_RESAMPLES = 10_000
PERMUTATION_RESAMPLES = 100_000
EXACT_MAX_N = 16  # 2^16 = 65,536 sign patterns: enumerating them is cheaper than sampling


def bootstrap_interval(
    values: Sequence[float],
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean of ``values`` (None without values).

    Draw ``resamples`` samples of size n with replacement from x_1..x_n, take each one's mean
    m*_k, and return the (1 - c)/2 and (1 + c)/2 quantiles of the m*_k (c = ``confidence``).
    With one value, or n equal values, the bootstrap distribution is a single point and the
    interval is exactly that value (returned as is, without float rounding of a mean).

    Seeded, so a page or a report shows the same interval on every run for the same data. For
    n below about 10 the percentile interval is known to be too narrow (it ignores the
    t-distribution's heavier tails); callers with few seeds should say so.
    """
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return None
    if data.size == 1 or np.all(data == data[0]):
        return float(data[0]), float(data[0])
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(resamples, data.size))].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def _paired(a: Sequence[float], b: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired samples need equal lengths, got {x.shape} and {y.shape}")
    return x, y


def paired_bootstrap_interval(
    a: Sequence[float],
    b: Sequence[float],
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of mean(d), d_i = a_i - b_i (a_i, b_i: the same seed i).

    Resampling the differences resamples seeds as pairs; a constant shift d_i = c gives
    exactly (c, c).
    """
    x, y = _paired(a, b)
    return bootstrap_interval(x - y, resamples, confidence, seed)


def paired_ratio_interval(
    a: Sequence[float],
    b: Sequence[float],
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the relative gain g = mean(a) / mean(b) - 1.

    Each resample draws seed indices i_1..i_n with replacement and computes
    g* = sum_k a_{i_k} / sum_k b_{i_k} - 1 (pairs stay together). None without values or
    when a resample of b sums to zero (the gain is undefined).
    """
    x, y = _paired(a, b)
    if x.size == 0:
        return None
    if x.size == 1:
        if y[0] == 0:
            return None
        gain = float(x[0] / y[0] - 1)
        return gain, gain
    rng = np.random.default_rng(seed)
    index = rng.integers(0, x.size, size=(resamples, x.size))
    denominators = y[index].sum(axis=1)
    if np.any(denominators == 0):
        return None
    gains = x[index].sum(axis=1) / denominators - 1
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(gains, [tail, 100 - tail])
    return float(low), float(high)


def ratio_interval(
    a: Sequence[float],
    b: Sequence[float],
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of g = (mean(a) - mean(b)) / |mean(b)|, the relative gain
    (mean(a) / mean(b) - 1 for a positive baseline), for independent samples.

    Each resample draws n_a values from a and, independently, n_b values from b, with
    replacement, and computes g* = (mean(a*) - mean(b*)) / |mean(b*)|. None when either sample
    has fewer than 2 values (one agent says nothing about the spread; callers say so instead
    of showing a point as an interval) or when a resample of b has mean zero (the gain is
    undefined).
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size < 2 or y.size < 2:
        return None
    rng = np.random.default_rng(seed)
    means_a = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    means_b = y[rng.integers(0, y.size, size=(resamples, y.size))].mean(axis=1)
    if np.any(means_b == 0):
        return None
    gains = (means_a - means_b) / np.abs(means_b)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(gains, [tail, 100 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class SignFlipResult:
    p_value: float
    exact: bool  # True: all 2^n sign patterns enumerated; False: Monte-Carlo estimate
    n: int
    statistic: float  # |mean(d)|
    min_p_value: float  # the smallest p-value this test can give with n pairs (exact: 2 / 2^n)


def sign_flip_test(
    a: Sequence[float],
    b: Sequence[float],
    resamples: int = PERMUTATION_RESAMPLES,
    seed: int = 0,
    exact_max_n: int = EXACT_MAX_N,
) -> SignFlipResult:
    """Two-sided paired permutation (sign-flip) test of H0: arms a and b are exchangeable.

    With d_i = a_i - b_i, under H0 each d_i is as likely as -d_i, so with the statistic
    T(d) = |mean(d)|:

        p = #{s in {-1, +1}^n : T(s * d) >= T(d)} / 2^n        (exact, n <= exact_max_n)
        p = (1 + #{k : T(s_k * d) >= T(d)}) / (1 + K)          (K random s_k, otherwise)

    The exact p counts the identity pattern, so p >= 1 / 2^n, and because T is symmetric
    p >= 2 / 2^n for any d != 0: with 5 seeds no result can reach p < 0.0625. The Monte-Carlo
    form is the unbiased (Phipson-Smyth) estimate. Ties are counted with a relative tolerance
    of 1e-9 so that float rounding in a sum cannot make an equal statistic look smaller.
    """
    x, y = _paired(a, b)
    d = x - y
    n = int(d.size)
    if n == 0:
        raise ValueError("the sign-flip test needs at least one pair")
    observed = abs(d.mean())
    tolerance = 1e-9 * max(1.0, float(np.abs(d).max()))
    if n <= exact_max_n:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
        flipped = np.abs(signs @ d) / n
        p = float(np.mean(flipped >= observed - tolerance))
        return SignFlipResult(p, True, n, float(observed), min(1.0, 2.0 / 2**n))
    rng = np.random.default_rng(seed)
    signs = rng.choice((-1.0, 1.0), size=(resamples, n))
    flipped = np.abs(signs @ d) / n
    hits = int(np.sum(flipped >= observed - tolerance))
    return SignFlipResult((1 + hits) / (1 + resamples), False, n, float(observed), 1 / (1 + resamples))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error), in the input's order.

    Sort p ascending as p_(1) <= ... <= p_(m); adjusted p_(k) = max_{j <= k} min(1, (m - j + 1) p_(j)).
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted
