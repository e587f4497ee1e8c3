"""Monte Carlo of a spot run: the spread (P50, P90) that the closed forms, being means, do not give.

Evictions are exponential (a Poisson process), as in Daly's model, so the count of failed
attempts at a segment is geometric and the count over n identical segments is negative binomial.
That samples a whole run in a few vector operations instead of walking it segment by segment;
the lost time of each failure is a truncated exponential. With very many failures per run the
sum of their lost times uses the normal approximation (the central limit theorem).
"""

from __future__ import annotations

import math

import numpy as np

_EXACT_DRAWS = 4_000_000  # above this many failures in all runs, sum lost times by the CLT


def _trunc_exp_sums(rng, counts: np.ndarray, limit: float, mtbf: float) -> np.ndarray:
    """Per run, the sum of ``counts[i]`` draws of t ~ Exp(mtbf) conditioned on t < limit."""
    counts = counts.astype(np.int64)
    total = int(counts.sum())
    if total == 0 or limit <= 0:
        return np.zeros(len(counts))
    a = -math.expm1(-limit / mtbf)  # P(t < limit)
    if total <= _EXACT_DRAWS:
        u = rng.random(total)
        t = -mtbf * np.log1p(-u * a)
        idx = np.repeat(np.arange(len(counts)), counts)
        return np.bincount(idx, weights=t, minlength=len(counts))
    # moments of the truncated exponential
    x = limit / mtbf
    mean = mtbf - limit / math.expm1(x)
    second = 2 * mtbf**2 - (limit**2 + 2 * mtbf * limit) * math.exp(-x) / a
    var = max(second - mean**2, 0.0)
    sums = counts * mean + np.sqrt(counts * var) * rng.standard_normal(len(counts))
    return np.clip(sums, 0.0, counts * limit)


def _restarts(rng, evictions: np.ndarray, restart_s: float, mtbf: float) -> tuple[np.ndarray, np.ndarray]:
    """Time spent restarting after ``evictions`` (restarts can be evicted too) and the extra evictions."""
    if restart_s <= 0:
        return np.zeros(len(evictions)), np.zeros(len(evictions))
    q = math.exp(-restart_s / mtbf)
    failed = np.where(evictions > 0, rng.negative_binomial(np.maximum(evictions, 1), q), 0)
    return evictions * restart_s + _trunc_exp_sums(rng, failed, restart_s, mtbf), failed


def simulate(solve_s: float, *, mtbf_s: float, checkpoint_s: float, restart_s: float,
             interval_s: float | None, emergency_save_s: float | None = None,
             runs: int = 4000, seed: int = 0) -> dict:
    """Wall seconds of ``runs`` simulated runs (interval None: emergency saves, nothing lost)."""
    rng = np.random.default_rng(seed)
    segment = (interval_s or 0.0) + (checkpoint_s if interval_s is not None else 0.0)
    if max(segment, restart_s) / mtbf_s > 30:
        # a segment survives with probability < e^-30: the run practically never finishes
        inf = float("inf")
        return {"runs": runs, "mean_s": inf, "ci95_s": inf, "p50_s": inf, "p90_s": inf,
                "mean_preemptions": inf, "p90_preemptions": inf}
    if interval_s is None:
        evictions = rng.poisson(solve_s / mtbf_s, runs)
        restart, extra = _restarts(rng, evictions, restart_s, mtbf_s)
        wall = solve_s + evictions * (emergency_save_s or 0.0) + restart
        count = evictions + extra
    else:
        full = int(solve_s // interval_s)
        rest = solve_s - full * interval_s
        wall = np.zeros(runs)
        count = np.zeros(runs, dtype=np.int64)
        for n, work in ((full, interval_s), (1 if rest > 1e-9 else 0, rest)):
            if n == 0:
                continue
            length = work + checkpoint_s
            p = math.exp(-length / mtbf_s)
            failures = rng.negative_binomial(n, p, runs) if p > 0 else np.full(runs, np.iinfo(np.int64).max // 4)
            restart, extra = _restarts(rng, failures, restart_s, mtbf_s)
            wall += n * length + _trunc_exp_sums(rng, failures, length, mtbf_s) + restart
            count += failures + extra.astype(np.int64)
    return summarize(wall, count)


def summarize(wall: np.ndarray, count: np.ndarray) -> dict:
    n = len(wall)
    return {
        "runs": n,
        "mean_s": float(wall.mean()),
        "ci95_s": float(1.96 * wall.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0,
        "p50_s": float(np.percentile(wall, 50)),
        "p90_s": float(np.percentile(wall, 90)),
        "mean_preemptions": float(count.mean()),
        "p90_preemptions": float(np.percentile(count, 90)),
    }
