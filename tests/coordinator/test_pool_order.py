"""The pool draw's random order of the window (pool.shuffled, pool.chunks): a permutation, uniform,
visited a few numbers at a time. Pure functions: no database."""

from __future__ import annotations

import itertools
import random
from collections import Counter

from swarm_app.coordinator.pool import chunks, shuffled


def test_shuffled_is_a_permutation_of_the_range():
    rng = random.Random(1)
    for first, last in [(1, 1), (5, 20), (100, 355)]:
        order = list(shuffled(first, last, rng))
        assert sorted(order) == list(range(first, last + 1))
    assert list(shuffled(1, 0, rng)) == []  # an empty window


def test_every_ordering_of_a_small_window_is_equally_likely():
    """All 24 orders of 4 numbers, 24,000 shuffles: each within 4 standard deviations of 1,000
    (a shuffle that favoured some orders, like swapping with any position instead of the
    positions not yet fixed, fails this)."""
    rng = random.Random(7)
    seen = Counter(tuple(shuffled(1, 4, rng)) for _ in range(24_000))
    assert set(seen) == set(itertools.permutations(range(1, 5)))
    expected, sd = 1000, (24_000 * (1 / 24) * (23 / 24)) ** 0.5
    assert all(abs(n - expected) < 4 * sd for n in seen.values()), seen


def test_chunks_start_at_4j_and_double_until_the_numbers_run_out():
    assert [len(c) for c in chunks(iter(range(200)), 4)] == [16, 32, 64, 88]
    assert [len(c) for c in chunks(iter(range(10)), 8)] == [10]
    assert list(itertools.chain(*chunks(iter(range(50)), 1))) == list(range(50))
