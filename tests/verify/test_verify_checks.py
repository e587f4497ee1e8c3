"""The t-test checks' verdicts: fail, inconclusive and pass at the edges of the shared alpha."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rubin.verify import checks
from rubin.verify.rules import load_rules


def _runs(losses, accuracy=0.9):
    return [SimpleNamespace(evals=[{"step": 10, "eval_loss": 2.0, "accuracy": 0.1},
                                   {"step": 20, "eval_loss": x, "accuracy": accuracy}]) for x in losses]


BASE = [0.9, 1.0, 1.1]  # mean 1, sd 0.1: se of a 3-against-3 difference is 0.0816


def _loss_check(new_mean, spread=0.1, **rules):
    new = [new_mean - spread, new_mean, new_mean + spread]
    out = checks.t_tests(_runs(BASE), _runs(new), load_rules().model_copy(update=rules))
    assert [c["name"] for c in out] == ["final_metric", "final_eval_loss", "steps_to_target"]
    return out[1]


def test_significant_at_its_share_of_alpha_fails():
    c = _loss_check(1.4)  # t = 4.9, p = 0.008 < 0.05 / 3
    assert c["verdict"] == "fail" and c["numbers"]["test"] == "student" and c["numbers"]["df"] == 4
    assert c["reason"].startswith("new is 40% worse: final eval_loss")


def test_significant_alone_but_not_at_its_share_is_inconclusive():
    c = _loss_check(1.27)  # t = 3.3, p = 0.03: below alpha, above alpha / 3
    assert 0.05 / 3 < c["numbers"]["p"] < 0.05
    assert c["verdict"] == "inconclusive"
    assert "significant at 0.05 alone, not at 0.0167 (its share of alpha over 3 tests); run more seeds" in c["reason"]


def test_a_large_change_that_is_noise_passes_and_says_what_the_seeds_resolve():
    c = _loss_check(1.15)  # t = 1.8, p = 0.14
    assert c["verdict"] == "pass" and c["numbers"]["p"] > 0.05
    # t_crit(df 4, two-sided 0.0167) = 3.96, times se 0.0816: 32% of the baseline mean.
    assert c["numbers"]["resolvable_pct"] == pytest.approx(32.3, abs=0.2)
    assert "no significant change" in c["reason"] and "resolve changes of ±32% or more" in c["reason"]


def test_a_change_within_tolerance_passes_however_significant():
    c = _loss_check(1.015, final_eval_loss_max_change_pct=2.0)
    assert c["verdict"] == "pass" and c["reason"].startswith("within 2%")


def test_welch_rule_uses_welch():
    # A tight new side: Student's pooled test keeps df 4 and fails; Welch's df falls to ~2 and the
    # same numbers are only inconclusive.
    student, welch = _loss_check(1.4, spread=0.01), _loss_check(1.4, spread=0.01, t_test="welch")
    assert student["numbers"]["test"] == "student" and student["verdict"] == "fail"
    assert welch["numbers"]["test"] == "welch" and welch["numbers"]["df"] < 2.1 and welch["verdict"] == "inconclusive"


def test_eval_loss_is_not_tested_twice_when_it_is_the_metric():
    out = checks.t_tests(_runs(BASE), _runs([1.2, 1.3, 1.4]), load_rules().model_copy(update={"metric": "eval_loss"}))
    assert [c["name"] for c in out] == ["final_metric", "steps_to_target"]
    # p = 0.021: a fail at 0.05 / 2 (two tests share alpha); it would not be at 0.05 / 3.
    assert 0.05 / 3 < out[0]["numbers"]["p"] < 0.025 and out[0]["verdict"] == "fail"
