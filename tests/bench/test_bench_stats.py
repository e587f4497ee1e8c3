"""Statistics on synthetic samples: median, extremes and the distribution-free 95% interval."""

import math
import random

import pytest

from rubin.bench import stats


def test_summary_of_known_samples():
    fig = stats.summarize([5.0, 1.0, 3.0, 2.0, 4.0, 100.0])
    assert fig["median"] == 3.5
    assert fig["min"] == 1.0 and fig["max"] == 100.0
    assert fig["n"] == 6
    # With 6 samples the 95% interval of the median is the full range (coverage 1 - 2/64).
    assert fig["ci95"] == [1.0, 100.0] and fig["ci_exact"] is True


def test_interval_ranks_for_ten_samples_are_the_second_and_ninth():
    # Binomial(10, 1/2): P(X <= 1) = 11/1024, so [x(2), x(9)] covers 1 - 22/1024 = 97.9%.
    assert stats.median_ci_ranks(10) == (1, 8)
    fig = stats.summarize(range(1, 11))
    assert fig["ci95"] == [2.0, 9.0]


def test_too_few_samples_give_the_range_and_say_it_is_not_exact():
    fig = stats.summarize([3.0, 1.0, 2.0])
    assert fig["ci95"] == [1.0, 3.0] and fig["ci_exact"] is False


def test_interval_covers_the_true_median_about_95_percent_of_the_time():
    rng = random.Random(1)
    hits, reps = 0, 600
    for _ in range(reps):
        # Skewed like timings: exponential with median ln 2.
        fig = stats.summarize(rng.expovariate(1.0) for _ in range(20))
        hits += fig["ci95"][0] <= 0.6931 <= fig["ci95"][1]
    assert 0.93 <= hits / reps <= 0.995


def test_non_finite_and_empty_samples():
    assert stats.summarize([float("nan"), 2.0, float("inf")])["n"] == 1
    assert stats.summarize([])["median"] is None


def test_decreasing_transform_keeps_the_figure_ordered():
    t = stats.summarize([1.0, 2.0, 4.0, 2.0, 2.0, 2.0])  # seconds
    bw = stats.transform(t, lambda s: 8.0 / s)  # bytes / time
    assert bw["median"] == 4.0
    assert bw["min"] == 2.0 and bw["max"] == 8.0
    assert bw["ci95"][0] <= bw["median"] <= bw["ci95"][1]


def test_relative_width():
    assert stats.rel_width({"median": 10.0, "ci95": [9.0, 11.0]}) == pytest.approx(0.2)


def _exact_ranks(n: int, level: float = 0.95):
    # the definition, summed afresh for every k with exact fractions: the reference for small n
    from fractions import Fraction

    best = None
    for k in range(1, n // 2 + 1):
        if 1 - 2 * Fraction(sum(math.comb(n, i) for i in range(k)), 2**n) >= Fraction(level).limit_denominator(1000):
            best = k
        else:
            break
    return None if best is None else (best - 1, n - best)


def test_interval_ranks_match_the_exact_definition_and_huge_samples_finish(monkeypatch):
    assert all(stats.median_ci_ranks(n) == _exact_ranks(n) for n in range(1, 160))
    # a timed loop on a fast machine can collect this many samples; summing afresh per rank did not
    # finish within the suite's 300 s timeout, one pass takes well under a second
    lo, hi = stats.median_ci_ranks(200_000)
    half = 1.959964 * math.sqrt(200_000) / 2  # the normal approximation: n/2 -+ 1.96 sqrt(n)/2
    assert abs(lo - (100_000 - half)) <= 2 and abs(hi - (100_000 + half)) <= 2
    # the log-space terms beyond EXACT_UP_TO agree with the exact integers
    floats = [stats.median_ci_ranks(n) for n in (2001, 2500, 3999)]
    monkeypatch.setattr(stats, "EXACT_UP_TO", 10_000)
    assert floats == [stats.median_ci_ranks(n) for n in (2001, 2500, 3999)]
