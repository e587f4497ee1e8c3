"""The Student-t and Welch code against published table values and hand-worked examples."""

from __future__ import annotations

import math

import pytest

from rubin.verify import stats


@pytest.mark.parametrize("t, df, p", [
    # two-sided critical values from the standard t table (alpha = 0.05 and 0.01)
    (12.706, 1, 0.05), (4.303, 2, 0.05), (2.776, 4, 0.05), (2.228, 10, 0.05), (2.042, 30, 0.05),
    (63.657, 1, 0.01), (4.604, 4, 0.01), (3.169, 10, 0.01), (2.750, 30, 0.01),
])
def test_t_two_sided_p_matches_the_t_table(t, df, p):
    assert stats.t_two_sided_p(t, df) == pytest.approx(p, rel=2e-3)
    assert stats.t_two_sided_p(-t, df) == pytest.approx(p, rel=2e-3)


def test_t_with_one_degree_of_freedom_is_cauchy():
    # For df = 1 the t distribution is Cauchy: P(|T| >= t) = 1 - 2 atan(t) / pi, exactly.
    for t in (0.1, 0.5, 1.0, 3.0, 40.0):
        assert stats.t_two_sided_p(t, 1) == pytest.approx(1 - 2 * math.atan(t) / math.pi, rel=1e-9)


def test_betainc_closed_forms():
    for x in (0.01, 0.3, 0.5, 0.77, 0.99):
        assert stats.betainc(1, 1, x) == pytest.approx(x, rel=1e-12)
        assert stats.betainc(3, 1, x) == pytest.approx(x ** 3, rel=1e-10)
        assert stats.betainc(1, 4, x) == pytest.approx(1 - (1 - x) ** 4, rel=1e-10)
    assert stats.betainc(7.5, 7.5, 0.5) == pytest.approx(0.5, abs=1e-12)
    assert stats.betainc(2, 3, 0.0) == 0.0 and stats.betainc(2, 3, 1.0) == 1.0


def test_t_quantile_inverts_the_table():
    assert stats.t_quantile(0.975, 4) == pytest.approx(2.776, abs=2e-3)
    assert stats.t_quantile(0.995, 10) == pytest.approx(3.169, abs=2e-3)


def test_welch_worked_example():
    # Hand-worked: means 20 and 24, variances 1.0 and 4.0 over 5 each ->
    # se^2 = 0.2 + 0.8 = 1.0, t = 4.0, df = 1 / (0.04/4 + 0.64/4) = 5.882...
    a = [19.0, 20.0, 21.0, 19.5, 20.5]  # variance 0.625: scale to 1.0 below
    a = [20 + (x - 20) * math.sqrt(1.0 / 0.625) for x in a]
    b = [24 + (x - 20) * math.sqrt(4.0 / 0.625) for x in [19.0, 20.0, 21.0, 19.5, 20.5]]
    r = stats.welch(a, b)
    assert r.diff == pytest.approx(4.0)
    assert r.t == pytest.approx(4.0)
    assert r.df == pytest.approx(1 / (0.04 / 4 + 0.64 / 4))
    assert r.p == pytest.approx(stats.t_two_sided_p(4.0, 1 / (0.04 / 4 + 0.64 / 4)))
    assert 0.005 < r.p < 0.01  # t table: df 5-6, t = 4.0 lies between the 0.01 and 0.005 columns


def test_welch_single_new_value_uses_the_prediction_interval():
    base = [10.0, 11.0, 12.0]  # mean 11, sd 1
    r = stats.welch(base, [13.0])
    assert r.method == "prediction"
    assert r.t == pytest.approx(2.0 / math.sqrt(1 + 1 / 3))
    assert r.df == 2


def test_welch_zero_variance_both_sides():
    assert stats.welch([1.0, 1.0, 1.0], [1.0, 1.0]).p == 1.0
    assert stats.welch([1.0, 1.0, 1.0], [2.0, 2.0]).p == 0.0


def test_olympic_drops_best_and_worst_from_five_up():
    assert stats.olympic([3, 1, 2, 9]) == [3, 1, 2, 9]
    assert stats.olympic([5, 1, 3, 9, 4]) == [3, 4, 5]


def test_against_scipy_where_installed():
    scipy_stats = pytest.importorskip("scipy.stats", reason="scipy is not a rubin dependency; the table tests above stand alone")
    a, b = [0.91, 0.90, 0.93, 0.89], [0.86, 0.88, 0.85]
    ours = stats.welch(a, b)
    ref = scipy_stats.ttest_ind(b, a, equal_var=False)
    assert ours.t == pytest.approx(ref.statistic, rel=1e-9)
    assert ours.p == pytest.approx(ref.pvalue, rel=1e-7)


def test_student_worked_example():
    # Hand-worked: base 1, 2, 3 (mean 2, var 1); new 4, 5, 6 (mean 5, var 1); pooled var 1,
    # se = sqrt(1/3 + 1/3) = 0.8165, t = 3 / 0.8165 = 3.674, df = 4: between the 0.05 (2.776) and
    # 0.01 (4.604) columns of the t table.
    r = stats.student([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    assert r.method == "student" and r.df == 4
    assert r.se == pytest.approx(math.sqrt(2 / 3))
    assert r.t == pytest.approx(3 / math.sqrt(2 / 3))
    assert 0.01 < r.p < 0.05


def test_student_keeps_the_degrees_of_freedom_welch_loses():
    # Three seeds a side with unequal spreads: Welch's df falls toward 2, Student's stays at 4,
    # and the same difference is significant at 0.05 for Student only.
    base, new = [1.0, 1.2, 1.4], [1.55, 1.6, 1.65]
    s, w = stats.student(base, new), stats.welch(base, new)
    assert s.df == 4 and w.df < 2.5
    assert s.p < 0.05 < w.p
    assert stats.ttest(base, new, "welch") == w and stats.ttest(base, new) == s


def test_resolvable_is_the_smallest_significant_difference():
    r = stats.student([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    # At 0.05 and df 4 the critical t is 2.776: a difference of 2.776 * se would give p = 0.05 exactly.
    assert r.resolvable(0.05) == pytest.approx(2.776 * math.sqrt(2 / 3), rel=1e-3)
    assert stats.t_two_sided_p(r.resolvable(0.05) / r.se, r.df) == pytest.approx(0.05, rel=1e-6)


def test_student_against_scipy_where_installed():
    scipy_stats = pytest.importorskip("scipy.stats", reason="scipy is not a rubin dependency; the worked example above stands alone")
    a, b = [0.91, 0.90, 0.93, 0.89], [0.86, 0.88, 0.85]
    ours, ref = stats.student(a, b), scipy_stats.ttest_ind(b, a, equal_var=True)
    assert ours.t == pytest.approx(ref.statistic, rel=1e-9)
    assert ours.p == pytest.approx(ref.pvalue, rel=1e-7)
