"""Small-sample statistics for comparing arms over seeds: seeded, deterministic, numpy only.

Used by the SAPO table study (lab/swarm_lab/study_analysis.py) and the coordinator's dashboard, so that each
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
* :func:`t_interval`, :func:`welch_interval`, :func:`welch_gain_interval`: t-based intervals
  of a mean, of a difference of two independent means and of the relative gain between them,
  which hold their 95% at 2 to 8 units where the percentile bootstrap does not (issue #47).
* :func:`permutation_test`: the exact two-sample permutation test over independent units
  (swarms against control seeds), its smallest possible p (:func:`permutation_min_p`), its
  power and the smallest difference it detects (:func:`permutation_power`,
  :func:`permutation_detectable_difference`).

Every random draw comes from ``numpy.random.default_rng(seed)``, so the same data give the same
interval and p-value on every call.

This module is long because it is the one definition of every statistic the study and the page
show (paired and unpaired, bootstrap, t and permutation, with their planning functions): split,
the two callers would drift apart again.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

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


# --- planning: what the exact sign-flip test can detect with n seeds (issue #18) -------------


def sign_flip_min_seeds(alpha: float = 0.05, family_size: int = 1) -> int:
    """The fewest pairs n for which the exact two-sided sign-flip test can reject at level
    ``alpha`` after Holm over ``family_size`` tests: its smallest p is 2 / 2^n, and Holm multiplies
    the smallest p of a family by m, so n is the least with m * 2 / 2^n <= alpha
    (m = 1: n = 6; m = 3: n = 7; m = 9: n = 9)."""
    n = 1
    while family_size * 2.0 / 2**n > alpha:
        n += 1
    return n


def sign_flip_power(
    mean: float,
    sd: float,
    n: int,
    alpha: float = 0.05,
    draws: int = 400,
    seed: int = 0,
    patterns: int = 4_000,
) -> float:
    """Simulated power of the two-sided sign-flip test at level ``alpha`` with n pairs whose
    differences are normal(mean, sd): the share of ``draws`` samples d_1..d_n with p <= alpha.

    p is the test's own (:func:`sign_flip_test`): exact over all 2^n patterns for n <= 16, over
    ``patterns`` random patterns (shared by all draws, Phipson-Smyth form) above. Seeded.
    """
    if n < 1:
        raise ValueError("power needs n >= 1")
    rng = np.random.default_rng(seed)
    d = rng.normal(mean, sd, size=(draws, n))  # one row per simulated study
    if n <= EXACT_MAX_N:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
        flipped = np.abs(d @ signs.T) / n  # [draws, 2^n]
        observed = np.abs(d.mean(axis=1, keepdims=True))
        tolerance = 1e-9 * np.maximum(1.0, np.abs(d).max(axis=1, keepdims=True))
        p = np.mean(flipped >= observed - tolerance, axis=1)
    else:
        signs = rng.choice((-1.0, 1.0), size=(patterns, n))
        flipped = np.abs(d @ signs.T) / n
        observed = np.abs(d.mean(axis=1, keepdims=True))
        tolerance = 1e-9 * np.maximum(1.0, np.abs(d).max(axis=1, keepdims=True))
        p = (1 + np.sum(flipped >= observed - tolerance, axis=1)) / (1 + patterns)
    return float(np.mean(p <= alpha))


def minimum_detectable_effect(
    sd: float, n: int, alpha: float = 0.05, power: float = 0.8, draws: int = 400, seed: int = 0
) -> float | None:
    """The smallest mean difference (in the differences' units) that the sign-flip test at level
    ``alpha`` detects with probability ``power`` with n pairs of normal(effect, sd) differences,
    by bisection on :func:`sign_flip_power` (seeded, so monotone in the effect up to its
    simulation error of about 0.02). None when no effect can be detected: n is below the
    test's minimum (2 / 2^n > alpha) or sd is not positive."""
    if not sd > 0 or 2.0 / 2**n > alpha:
        return None
    low, high = 0.0, sd
    while sign_flip_power(high, sd, n, alpha, draws, seed) < power:
        low, high = high, high * 2
        if high > 1e3 * sd:
            return None
    for _ in range(12):
        middle = (low + high) / 2
        if sign_flip_power(middle, sd, n, alpha, draws, seed) >= power:
            high = middle
        else:
            low = middle
    return high


def seeds_for_power(
    effect: float,
    sd: float,
    alpha: float = 0.05,
    power: float = 0.8,
    max_n: int = 40,
    draws: int = 400,
    seed: int = 0,
) -> int | None:
    """The fewest pairs n (up to ``max_n``) for which the sign-flip test at level ``alpha``
    reaches ``power`` against normal(effect, sd) differences; None if even ``max_n`` does not.
    Starts at the test's own minimum (2 / 2^n <= alpha), which no normal approximation knows."""
    if effect == 0 or not sd >= 0:
        return None
    n = sign_flip_min_seeds(alpha)
    while n <= max_n:
        if sd == 0 or sign_flip_power(effect, sd, n, alpha, draws, seed) >= power:
            return n
        n += 1
    return None


# --- t-intervals and slopes (issue #29: the time course, and wording no stronger than both intervals)


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) for 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function with ``df`` degrees of freedom:
    P(T <= t) = 1 - I_{df / (df + t^2)}(df / 2, 1 / 2) / 2 for t >= 0, symmetric below."""
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


@lru_cache(maxsize=1024)
def t_quantile(probability: float, df: float) -> float:
    """The ``probability`` quantile of Student's t with ``df`` degrees of freedom (bisection on
    :func:`t_cdf`; t_0.975 = 12.706 at df 1, 2.262 at df 9, 2.045 at df 29). Memoized: the
    intervals below ask for whole degrees of freedom, a few distinct values per page."""
    if not 0.0 < probability < 1.0 or df <= 0:
        raise ValueError("t_quantile needs 0 < probability < 1 and df > 0")
    if probability < 0.5:
        return -t_quantile(1.0 - probability, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < probability:
        high *= 2.0
    for _ in range(200):
        middle = (low + high) / 2.0
        if t_cdf(middle, df) < probability:
            low = middle
        else:
            high = middle
        if high - low < 1e-12 * max(1.0, high):
            break
    return (low + high) / 2.0


def t_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """The t-interval of a mean: mean -+ t_{(1 + c)/2, n - 1} sd / sqrt(n). None with fewer than
    2 values (no spread to estimate); n equal values give exactly that value. Unlike the
    percentile bootstrap it widens with the t distribution's tails at small n."""
    data = np.asarray(values, dtype=float)
    if data.size < 2:
        return None
    if np.all(data == data[0]):
        return float(data[0]), float(data[0])
    mean = float(data.mean())
    half = t_quantile((1 + confidence) / 2, data.size - 1) * float(data.std(ddof=1)) / math.sqrt(data.size)
    return mean - half, mean + half


def least_squares_slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Ordinary least-squares slope of ys on xs; None with fewer than 2 distinct xs."""
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    if x.size != y.size:
        raise ValueError(f"a slope needs as many xs as ys, got {x.size} and {y.size}")
    if x.size < 2 or np.all(x == x[0]):
        return None
    dx = x - x.mean()
    return float(np.sum(dx * (y - y.mean())) / np.sum(dx * dx))


# --- two independent samples at small n: swarms against control seeds (issue #47) --------------

EXACT_MAX_SPLITS = 20_000  # C(16, 8) = 12,870 splits: enumerating them is cheaper than sampling


def welch_df(var_mean_a: float, n_a: int, var_mean_b: float, n_b: int) -> float:
    """Welch-Satterthwaite degrees of freedom of v_a + v_b, v = the variance of a sample's mean
    (s^2 / n): df = (v_a + v_b)^2 / (v_a^2 / (n_a - 1) + v_b^2 / (n_b - 1)); it lies between
    min(n_a, n_b) - 1 and n_a + n_b - 2. Needs n_a, n_b >= 2 and v_a + v_b > 0."""
    return (var_mean_a + var_mean_b) ** 2 / (var_mean_a**2 / (n_a - 1) + var_mean_b**2 / (n_b - 1))


def _t_half_width(var_mean_a: float, n_a: int, var_mean_b: float, n_b: int, confidence: float) -> float:
    """t_{(1 + c)/2, floor(df)} sqrt(v_a + v_b), df Welch's (:func:`welch_df`) rounded down to a
    whole number: never narrower than Welch's own interval (a t quantile falls as df grows)."""
    df = max(1, math.floor(welch_df(var_mean_a, n_a, var_mean_b, n_b) + 1e-9))
    return t_quantile((1 + confidence) / 2, df) * math.sqrt(var_mean_a + var_mean_b)


def welch_interval(
    mean_a: float, var_a: float, n_a: int, mean_b: float, var_b: float, n_b: int, confidence: float = 0.95
) -> tuple[float, float] | None:
    """Welch's t interval of mean_a - mean_b from two independent samples' means, sample
    variances (ddof 1) and sizes: (mean_a - mean_b) -+ t_{(1 + c)/2, floor(df)} sqrt(var_a / n_a
    + var_b / n_b), df :func:`welch_df` rounded down. None when either sample has fewer than 2
    values (no spread to estimate); two spreads of 0 give the difference itself."""
    if n_a < 2 or n_b < 2:
        return None
    difference = mean_a - mean_b
    var_mean_a, var_mean_b = var_a / n_a, var_b / n_b
    if var_mean_a + var_mean_b <= 0:
        return difference, difference
    half = _t_half_width(var_mean_a, n_a, var_mean_b, n_b, confidence)
    return difference - half, difference + half


def welch_gain_interval(
    a: Sequence[float], b: Sequence[float], confidence: float = 0.95
) -> tuple[float, float] | None:
    """The t interval of the relative gain g = (mean(a) - mean(b)) / |mean(b)| of two independent
    samples (swarms against control seeds), by the delta method with Welch's degrees of freedom:

        v_a = s_a^2 / (n_a mean(b)^2),   v_b = mean(a)^2 s_b^2 / (n_b mean(b)^4)
        g -+ t_{(1 + c)/2, floor(df)} sqrt(v_a + v_b),   df = (v_a + v_b)^2 / (v_a^2 / (n_a - 1) + v_b^2 / (n_b - 1))

    (s^2: sample variances, ddof 1; v_a, v_b the two terms of the gain's variance). Centred on
    g, so the page's point is always inside it. None when either sample has fewer than 2 values
    or mean(b) is 0 (the gain is undefined); no spread at all gives g itself. Its coverage at
    2 to 8 units per arm is measured in tests/worker/shared/test_small_sample_coverage.py."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size < 2 or y.size < 2:
        return None
    mean_a, mean_b = float(x.mean()), float(y.mean())
    if mean_b == 0:
        return None
    gain = (mean_a - mean_b) / abs(mean_b)
    var_a = float(x.var(ddof=1)) / (x.size * mean_b**2)
    var_b = mean_a**2 * float(y.var(ddof=1)) / (y.size * mean_b**4)
    if var_a + var_b <= 0:
        return gain, gain
    half = _t_half_width(var_a, int(x.size), var_b, int(y.size), confidence)
    return gain - half, gain + half


def permutation_min_p(n_a: int, n_b: int) -> float:
    """The smallest p the two-sided exact permutation test (:func:`permutation_test`) can give
    with n_a units against n_b: each one-sided tail holds at least the observed split out of
    C(n_a + n_b, n_a), and the two-sided p doubles the smaller tail, so
    p_min = min(1, 2 / C(n_a + n_b, n_a)): 2 vs 3 -> 0.2, 3 vs 3 -> 0.1, 3 vs 4 -> 0.057,
    3 vs 5 -> 0.036, 4 vs 4 -> 0.029. 1 with an empty sample."""
    if n_a < 1 or n_b < 1:
        return 1.0
    return min(1.0, 2.0 / math.comb(n_a + n_b, n_a))


@dataclass(frozen=True)
class PermutationResult:
    p_value: float
    exact: bool  # True: every split enumerated; False: Monte-Carlo estimate
    n_a: int
    n_b: int
    statistic: float  # mean(a) - mean(b)
    min_p_value: float  # the smallest p this test can give with these sizes (permutation_min_p)


@lru_cache(maxsize=64)
def _splits(n_a: int, n: int) -> np.ndarray:
    """Every choice of n_a of n positions as the rows of a 0/1 matrix [C(n, n_a), n], so that
    ``values @ splits.T`` sums each choice (memoized: a page asks for a few designs, often; the
    matrix is only read)."""
    chosen = np.array(list(itertools.combinations(range(n), n_a)), dtype=np.intp).reshape(-1, n_a)
    matrix = np.zeros((chosen.shape[0], n))
    np.put_along_axis(matrix, chosen, 1.0, axis=1)
    return matrix


def _random_splits(n_a: int, n: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` random choices of n_a of n positions, as :func:`_splits`' 0/1 rows."""
    order = rng.permuted(np.tile(np.arange(n), (count, 1)), axis=1)
    matrix = np.zeros((count, n))
    np.put_along_axis(matrix, order[:, :n_a], 1.0, axis=1)
    return matrix


def permutation_test(
    a: Sequence[float],
    b: Sequence[float],
    resamples: int = PERMUTATION_RESAMPLES,
    seed: int = 0,
    exact_max_splits: int = EXACT_MAX_SPLITS,
) -> PermutationResult:
    """Two-sided exact permutation test of H0: the n_a units of a and the n_b units of b come
    from one distribution (independent units: swarms against control seeds).

    With T = mean(a) - mean(b) and T*_k the same statistic for each split k of the pooled units
    into n_a and n_b (the observed split among them):

        p = min(1, 2 min(#{k : T*_k >= T}, #{k : T*_k <= T}) / C(n_a + n_b, n_a))   (exact)

    the doubled smaller tail, so p >= :func:`permutation_min_p`. Above ``exact_max_splits``
    splits, K random splits give each tail as (1 + hits) / (1 + K) (Phipson-Smyth). Ties are
    counted with a relative tolerance of 1e-9, as in :func:`sign_flip_test`."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n_a, n_b = int(x.size), int(y.size)
    if n_a < 1 or n_b < 1:
        raise ValueError("the permutation test needs at least one unit on each side")
    pooled = np.concatenate([x, y])
    total, n = float(pooled.sum()), n_a + n_b
    observed = float(x.mean() - y.mean())
    tolerance = 1e-9 * max(1.0, float(np.abs(pooled).max()))
    splits = math.comb(n, n_a)
    if splits <= exact_max_splits:
        sums = _splits(n_a, n) @ pooled
        statistics = sums / n_a - (total - sums) / n_b
        upper = float(np.mean(statistics >= observed - tolerance))
        lower = float(np.mean(statistics <= observed + tolerance))
        exact = True
    else:
        sums = _random_splits(n_a, n, resamples, np.random.default_rng(seed)) @ pooled
        statistics = sums / n_a - (total - sums) / n_b
        upper = (1 + int(np.sum(statistics >= observed - tolerance))) / (1 + resamples)
        lower = (1 + int(np.sum(statistics <= observed + tolerance))) / (1 + resamples)
        exact = False
    p = min(1.0, 2 * min(upper, lower))
    return PermutationResult(p, exact, n_a, n_b, observed, permutation_min_p(n_a, n_b))


def permutation_power(
    difference: float,
    sd: float,
    n_a: int,
    n_b: int,
    alpha: float = 0.05,
    draws: int = 400,
    seed: int = 0,
    patterns: int = 2_000,
) -> float:
    """Simulated power of :func:`permutation_test` at level ``alpha``: the share of ``draws``
    designs, n_a units normal(difference, sd) against n_b units normal(0, sd), whose p <= alpha.
    Every split when there are at most EXACT_MAX_SPLITS, otherwise ``patterns`` random splits
    shared by all draws (Phipson-Smyth form). Seeded. 0 when the design cannot reach ``alpha``."""
    if permutation_min_p(n_a, n_b) > alpha:
        return 0.0
    rng = np.random.default_rng(seed)
    n = n_a + n_b
    data = rng.normal(0.0, sd, size=(draws, n))
    data[:, :n_a] += difference
    total = data.sum(axis=1, keepdims=True)
    observed = data[:, :n_a].mean(axis=1, keepdims=True) - data[:, n_a:].mean(axis=1, keepdims=True)
    tolerance = 1e-9 * np.maximum(1.0, np.abs(data).max(axis=1, keepdims=True))
    if math.comb(n, n_a) <= EXACT_MAX_SPLITS:
        sums = data @ _splits(n_a, n).T  # [draws, splits]
        statistics = sums / n_a - (total - sums) / n_b
        upper = np.mean(statistics >= observed - tolerance, axis=1)
        lower = np.mean(statistics <= observed + tolerance, axis=1)
    else:
        sums = data @ _random_splits(n_a, n, patterns, rng).T
        statistics = sums / n_a - (total - sums) / n_b
        upper = (1 + np.sum(statistics >= observed - tolerance, axis=1)) / (1 + patterns)
        lower = (1 + np.sum(statistics <= observed + tolerance, axis=1)) / (1 + patterns)
    p = np.minimum(1.0, 2 * np.minimum(upper, lower))
    return float(np.mean(p <= alpha))


def permutation_detectable_difference(
    sd: float, n_a: int, n_b: int, alpha: float = 0.05, power: float = 0.8, draws: int = 400, seed: int = 0
) -> float | None:
    """The smallest true difference of means (in sd's units) that :func:`permutation_test`
    detects at level ``alpha`` with probability ``power``, n_a units against n_b, both normal
    with standard deviation ``sd``: bisection on :func:`permutation_power` (seeded, so monotone
    in the difference up to its simulation error of about 0.02). None when the design cannot
    reach ``alpha`` at all (:func:`permutation_min_p` > alpha) or sd is not positive."""
    if not sd > 0 or permutation_min_p(n_a, n_b) > alpha:
        return None
    low, high = 0.0, sd
    while permutation_power(high, sd, n_a, n_b, alpha, draws, seed) < power:
        low, high = high, high * 2
        if high > 1e3 * sd:
            return None
    for _ in range(12):
        middle = (low + high) / 2
        if permutation_power(middle, sd, n_a, n_b, alpha, draws, seed) >= power:
            high = middle
        else:
            low = middle
    return high
