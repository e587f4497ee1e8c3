"""Student's and Welch's t-tests, olympic scoring and a mean ± spread, on the standard library alone.

scipy is not a dependency of rubin, so the Student-t distribution comes from the regularized
incomplete beta function (continued fraction, Lentz's method), which is accurate to ~1e-12 here.
The tests check it against published t-table values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def _betacf(a: float, b: float, x: float) -> float:
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    # The continued fraction converges fast only on one side of the mean; use the symmetry on the other.
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if math.isnan(t) or df <= 0:
        return float("nan")
    if math.isinf(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p (p > 0.5), by bisection on the two-sided p-value."""
    target = 2.0 * (1.0 - p)
    lo, hi = 0.0, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_two_sided_p(mid, df) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def mean(xs) -> float:
    return sum(xs) / len(xs)


def std(xs) -> float:
    """Sample standard deviation (n - 1); 0 for a single value."""
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def olympic(xs: list[float]) -> list[float]:
    """Drop the best and the worst value (MLPerf's olympic scoring); applied from 5 values up."""
    if len(xs) < 5:
        return list(xs)
    s = sorted(xs)
    return s[1:-1]


@dataclass
class TTest:
    t: float
    df: float
    p: float
    diff: float  # mean(new) - mean(base)
    method: str  # "student", "welch" or "prediction" (one new value against the baseline's spread)
    se: float = 0.0  # standard error of diff

    def resolvable(self, level: float) -> float:
        """The smallest |diff| that these samples would call significant at ``level``: t_crit * se."""
        return t_quantile(1.0 - level / 2.0, self.df) * self.se if self.df > 0 else math.inf


def _prediction(base: list[float], new_value: float) -> TTest:
    nb, mb = len(base), mean(base)
    diff, s = new_value - mb, std(base)
    if s == 0.0:
        return _degenerate(diff, nb - 1, "prediction")
    se = s * math.sqrt(1.0 + 1.0 / nb)
    return TTest(diff / se, nb - 1, t_two_sided_p(diff / se, nb - 1), diff, "prediction", se)


def _degenerate(diff: float, df: float, method: str) -> TTest:
    return TTest(0.0 if diff == 0 else math.copysign(math.inf, diff), df, 1.0 if diff == 0 else 0.0, diff, method)


def student(base: list[float], new: list[float]) -> TTest:
    """Student's two-sample t-test with one pooled variance, df = nb + nn - 2.

    verify tests the null hypothesis that the move changed nothing, and under it both sides are
    seeds of one training process with one seed-to-seed variance: pooling is then exact and keeps
    every degree of freedom, where Welch's df falls toward 2 with 3 seeds a side (and its power with it).
    """
    nb, nn = len(base), len(new)
    if nn == 1:
        return _prediction(base, new[0])
    diff = mean(new) - mean(base)
    df = nb + nn - 2
    pooled = ((nb - 1) * std(base) ** 2 + (nn - 1) * std(new) ** 2) / df
    if pooled == 0.0:
        return _degenerate(diff, df, "student")
    se = math.sqrt(pooled * (1.0 / nb + 1.0 / nn))
    return TTest(diff / se, df, t_two_sided_p(diff / se, df), diff, "student", se)


def ttest(base: list[float], new: list[float], kind: str = "student") -> TTest:
    return welch(base, new) if kind == "welch" else student(base, new)


def welch(base: list[float], new: list[float]) -> TTest:
    """Welch's unequal-variance t-test of new against base.

    With a single new value there is no variance on that side: the value is tested against the
    baseline's prediction interval instead, t = (x - mean) / (s * sqrt(1 + 1/n)), df = n - 1.
    """
    nb, nn = len(base), len(new)
    if nn == 1:
        return _prediction(base, new[0])
    diff = mean(new) - mean(base)
    vb, vn = std(base) ** 2 / nb, std(new) ** 2 / nn
    se2 = vb + vn
    if se2 == 0.0:
        return _degenerate(diff, nb + nn - 2, "welch")
    t = diff / math.sqrt(se2)
    df = se2 ** 2 / ((vb ** 2 / (nb - 1) if nb > 1 else 0.0) + (vn ** 2 / (nn - 1)))
    return TTest(t, df, t_two_sided_p(t, df), diff, "welch", math.sqrt(se2))
