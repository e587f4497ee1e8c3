"""Statistics for benchmark figures: median, min, max, mean and a 95% interval from repeated trials.

The interval is for the median and distribution-free (order statistics of the binomial), because
timings are skewed (a slow outlier is common, a fast one is not) and a mean +- t*sd interval would
be pulled by the outliers. With fewer than 6 trials no order-statistic interval reaches 95%, so the
interval is then the full min..max range and ``ci_exact`` says so.
"""

from __future__ import annotations

import math
from statistics import fmean, median, pstdev
from typing import Callable, Iterable

EXACT_UP_TO = 2000  # samples up to which the binomial terms are summed as exact integers (fast enough there)


def _binom_pmfs(n: int):
    """P(X = i) for X ~ Binomial(n, 1/2), i = 0, 1, ... as floats. Each term comes from the previous one,
    so the cumulative sum costs one step per rank: exact integers up to EXACT_UP_TO samples, log space
    beyond (a timed loop on a fast machine can collect 10^5 samples or more)."""
    if n <= EXACT_UP_TO:
        c, whole = 1, 2**n
        for i in range(n + 1):
            yield c / whole
            c = c * (n - i) // (i + 1)
        return
    head = math.lgamma(n + 1) - n * math.log(2)
    for i in range(n + 1):
        yield math.exp(head - math.lgamma(i + 1) - math.lgamma(n - i + 1))


def median_ci_ranks(n: int, level: float = 0.95) -> tuple[int, int] | None:
    """0-based ranks (lo, hi) of the sorted sample bounding the median with >= ``level`` coverage.

    The coverage of [x_(k), x_(n-k+1)] is 1 - 2 P(X <= k-1); the largest k that keeps it is wanted."""
    if n < 1 or level >= 1.0:
        return None
    best, cdf = None, 0.0
    for k, pmf in enumerate(_binom_pmfs(n), 1):
        if k > n // 2:
            break
        cdf += pmf  # P(X <= k-1)
        if 1.0 - 2.0 * cdf >= level - 1e-12:
            best = k
        else:
            break
    return None if best is None else (best - 1, n - best)


def summarize(samples: Iterable[float]) -> dict:
    """One figure: ``median, min, max, mean, stdev, ci95 [lo, hi], n, ci_exact``."""
    xs = sorted(float(x) for x in samples if x is not None and math.isfinite(float(x)))
    if not xs:
        return {"median": None, "min": None, "max": None, "mean": None, "stdev": None, "ci95": [None, None], "n": 0, "ci_exact": False}
    ranks = median_ci_ranks(len(xs))
    if ranks is None:
        lo, hi, exact = xs[0], xs[-1], False
    else:
        lo, hi, exact = xs[ranks[0]], xs[ranks[1]], True
    return {
        "median": median(xs),
        "min": xs[0],
        "max": xs[-1],
        "mean": fmean(xs),
        "stdev": pstdev(xs) if len(xs) > 1 else 0.0,
        "ci95": [lo, hi],
        "n": len(xs),
        "ci_exact": exact,
    }


def transform(figure: dict, fn: Callable[[float], float]) -> dict:
    """Apply a monotone function to a figure (e.g. time -> bandwidth). A decreasing ``fn`` swaps
    min/max and the interval ends, so the result stays ordered. ``stdev`` and ``mean`` are dropped
    (they do not transform through a non-linear function)."""
    if figure.get("median") is None:
        return summarize([])
    vals = [fn(figure["min"]), fn(figure["max"])]
    ci = [fn(figure["ci95"][0]), fn(figure["ci95"][1])]
    return {
        "median": fn(figure["median"]),
        "min": min(vals),
        "max": max(vals),
        "mean": None,
        "stdev": None,
        "ci95": [min(ci), max(ci)],
        "n": figure["n"],
        "ci_exact": figure.get("ci_exact", False),
    }


def rel_width(figure: dict) -> float | None:
    """Width of the interval relative to the median (a noise budget: 0.02 = +-1%)."""
    m = figure.get("median")
    if not m:
        return None
    lo, hi = figure["ci95"]
    return (hi - lo) / abs(m)
