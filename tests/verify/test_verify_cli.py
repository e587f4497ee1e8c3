"""rubin verify on real runs: the method chosen, the verdict, rollback lines, bad input."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from utils import invoke

pytestmark = pytest.mark.slow


def _copy(src, dst):
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("checkpoints", "heartbeats"))
    return dst


def test_exact_same_config_and_seed_is_bit_identical(runs):
    r = invoke(["verify", runs["base0"], "--new", runs["rerun0"]])
    assert r.exit_code == 0, r.stderr
    assert "method: exact" in r.stdout
    assert "bit-identical" in r.stdout and "PASS" in r.stdout


def test_exact_reports_the_first_divergent_step(runs, tmp_path):
    new = _copy(runs["rerun0"], tmp_path / "tampered")
    rows = [json.loads(line) for line in (new / "metrics.jsonl").read_text().splitlines()]
    rows[6]["loss"] += 1e-6  # step 7: one ulp-scale change is enough to break bit-equality
    (new / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = invoke(["verify", runs["base0"], "--new", new])
    assert r.exit_code == 3
    assert "diverge at step 7" in r.stdout.replace("\n", " ")
    assert r.stderr.startswith("rollback recommended: exact")


def test_resumed_steps_count_once_the_last_row_wins(runs, tmp_path):
    new = _copy(runs["rerun0"], tmp_path / "resumed")
    text = (new / "metrics.jsonl").read_text()
    # A crashed first attempt logged step 3 with another loss; the step was redone after the resume.
    (new / "metrics.jsonl").write_text(json.dumps({"step": 3, "loss": 99.0}) + "\n" + '{"step": 4, "lo' + "\n" + text)
    r = invoke(["verify", runs["base0"], "--new", new, "--json"])
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["method"] == "exact" and out["verdict"] == "pass"
    assert any("skipped an invalid line" in p for p in out["problems"])


def test_curve_for_one_run_a_side_with_different_seeds(runs):
    r = invoke(["verify", runs["base0"], "--new", runs["base1"], "--json"])
    out = json.loads(r.stdout)
    assert out["method"] == "curve"
    assert "configs differ (run.seed" in out["method_reason"]
    curve = next(c for c in out["checks"] if c["name"] == "curve")
    # Independent seeds differ by far more than Megatron's 1% at some step.
    assert curve["numbers"]["max_rel_diff_pct"] > 1.0 and curve["verdict"] == "fail"
    assert r.exit_code == 3
    assert r.stderr.startswith("rollback recommended: curve_tolerance_pct=1.0: new loss is")


def test_statistical_flags_a_learning_rate_too_low(runs):
    base = [runs[f"base{s}"] for s in range(3)]
    new = [runs[f"low{s}"] for s in range(3)]
    r = invoke(["verify", *base, "--new", *new, "--json"])
    assert r.exit_code == 3
    out = json.loads(r.stdout)
    assert out["method"] == "statistical" and out["verdict"] == "fail"
    env = next(c for c in out["checks"] if c["name"] == "envelope")
    assert env["verdict"] == "fail" and env["numbers"]["above"] > env["numbers"]["below"]  # higher loss: converges slower
    # The final eval loss is tested beside accuracy, with Student's t over 3 + 3 seeds (df 4).
    loss = next(c for c in out["checks"] if c["name"] == "final_eval_loss")
    assert loss["verdict"] == "fail" and loss["numbers"]["direction"] == "worse"
    assert loss["numbers"]["test"] == "student" and loss["numbers"]["df"] == 4
    assert {"key": "optim.lr", "baseline": 0.03, "new": 0.001} in out["config_diff"]
    lines = r.stderr.strip().splitlines()
    assert lines and all(line.startswith("rollback recommended: ") for line in lines)
    assert any("envelope_max_outside_pct=20.0" in line and "above (higher loss)" in line for line in lines)


def test_statistical_against_itself_passes(runs):
    base = [runs[f"base{s}"] for s in range(3)]
    r = invoke(["verify", *base, "--new", *base])
    assert r.exit_code == 0, r.stderr
    assert "method: statistical" in r.stdout and "verdict: PASS" in r.stdout
    assert r.stderr == ""


def test_nan_events_break_their_rule(runs, tmp_path):
    new = _copy(runs["rerun0"], tmp_path / "nan")
    with open(new / "events.jsonl", "a") as f:
        f.write(json.dumps({"time": 0, "kind": "nan", "rank": 0, "step": 5}) + "\n")
    r = invoke(["verify", runs["base0"], "--new", new])
    assert r.exit_code == 3
    assert "rollback recommended: max_nan_events=0: 1 nan event(s)" in r.stderr


def test_min_speedup_rule_from_a_rules_file(runs, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text("min_speedup: 1000\n")
    r = invoke(["verify", runs["base0"], "--new", runs["rerun0"], "--rules", rules])
    assert r.exit_code == 3
    assert "rollback recommended: min_speedup=1000.0: new runs" in r.stderr


def test_different_workloads_are_refused(runs):
    r = invoke(["verify", runs["base0"], "--new", runs["wide"]])
    assert r.exit_code == 2
    assert "different workloads: model.args=" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_too_few_seeds_for_statistical(runs):
    r = invoke(["verify", runs["base0"], runs["base1"], "--new", runs["low0"], "--method", "statistical"])
    assert r.exit_code == 2
    assert "too few seeds for --method statistical: 2 baseline" in r.stderr


def test_exact_refused_when_configs_differ(runs):
    r = invoke(["verify", runs["base0"], "--new", runs["base1"], "--method", "exact"])
    assert r.exit_code == 2
    assert "--method exact cannot be used: configs differ (run.seed" in r.stderr


def test_a_side_must_be_seeds_of_one_config(runs):
    r = invoke(["verify", runs["base0"], runs["low1"], runs["base2"], "--new", runs["low0"]])
    assert r.exit_code == 2
    assert "not seeds of one config: optim.lr=0.001" in r.stderr


def test_not_a_run_dir(tmp_path, runs):
    r = invoke(["verify", tmp_path, "--new", runs["base0"]])
    assert r.exit_code == 2
    assert "is not a run dir: it has no config.yaml" in r.stderr


def test_rules_file_with_an_unknown_key(runs, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text("envelope_margin: 5\n")
    r = invoke(["verify", runs["base0"], "--new", runs["rerun0"], "--rules", rules])
    assert r.exit_code == 2
    assert "unknown key 'envelope_margin' (did you mean 'envelope_margin_pct'?)" in r.stderr


def test_print_rules_is_the_shipped_defaults():
    r = invoke(["verify", "--print-rules"])
    assert r.exit_code == 0
    rules = yaml.safe_load(r.stdout)
    assert rules["curve_tolerance_pct"] == 1.0 and rules["alpha"] == 0.05 and rules["max_nan_events"] == 0
