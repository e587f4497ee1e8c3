"""compare: SuperBench-style rules (pass, fail, marginal, missing), peer outliers, env diff, speedup, CLI."""

import json

import pytest
from utils import invoke

from rubin.bench import compare, results


def fig(median, spread=0.01):
    """A figure whose 95% interval is median +- spread (relative)."""
    return {"median": median, "min": median * (1 - 2 * spread), "max": median * (1 + 2 * spread),
            "ci95": [median * (1 - spread), median * (1 + spread)], "n": 10}


def doc(*, matmul=(700.0,), busbw=100.0, step_s=0.1, launch_us=5.0, sps=1000.0, driver="580.1", nccl="2.27.3"):
    """A results document as `rubin bench` writes it, with one matmul row per GPU."""
    mm_rows = [{"device": f"cuda:{i}", "dtype": "bf16", "m": 8192, "n": 8192, "k": 8192, "tflops": fig(v),
                "time_us": fig(1e3), "pct_of_spec": None} for i, v in enumerate(matmul)]
    return {
        "schema_version": 1, "kind": "rubin.bench.results", "rubin_version": "0.1.0", "created": "2026-01-01T00:00:00+00:00",
        "preset": "full", "suites": ["matmul", "collectives", "launch", "model"], "wall_s": 1.0,
        "env": {"host": "node-a", "torch": "2.13.0", "driver": driver, "nccl": nccl},
        "device": {"type": "cuda", "name": "NVIDIA H200", "count": len(matmul)}, "spec": None, "spec_match": {},
        "benchmarks": {
            "matmul": {"status": "ok", "rows": mm_rows,
                       "summary": {f"cuda:{i}": {"bf16": {"mamf_tflops": v}} for i, v in enumerate(matmul)}},
            "collectives": {"status": "ok", "rows": [{"op": "all_reduce", "bytes": 2**30, "ranks": 8, "time_us": fig(1.0),
                                                      "algbw_gbps": fig(busbw / 1.75), "busbw_gbps": fig(busbw), "verified": True}],
                            "summary": {"all_reduce": {"busbw_gbps_at_max_bytes": busbw, "max_bytes": 2**30}}},
            "launch": {"status": "ok", "rows": [{"device": "cuda:0", "op": "tiny_kernel", "kernels": 100,
                                                 "wall_us": fig(launch_us), "event_us": fig(launch_us)}]},
            "model": {"status": "ok", "rows": [{"workload": "gpt124m", "precision": "bf16", "samples_per_s": fig(sps),
                                                "tokens_per_s": fig(sps * 1024), "step_time_median_s": fig(step_s),
                                                "step_time_p90_s": fig(step_s * 1.1)}]},
        },
    }


RULES = compare.load_rules(None)


def verdicts(report):
    return {r["metric"]: r["verdict"] for r in report["metrics"]}


def test_identical_results_pass():
    rep = compare.compare(doc(), doc(), RULES)
    assert rep["verdict"] == "pass" and rep["counts"]["fail"] == 0
    assert rep["metrics"] and all(r["verdict"] == "pass" for r in rep["metrics"])


def test_bandwidth_10_percent_below_fails_and_4_percent_below_passes():
    assert verdicts(compare.compare(doc(), doc(busbw=90.0), RULES))["collectives/all_reduce/1073741824/busbw_gbps"] == "fail"
    assert verdicts(compare.compare(doc(), doc(busbw=96.0, matmul=(700.0,)), RULES))[
        "collectives/all_reduce/1073741824/busbw_gbps"] == "pass"


def test_time_is_judged_the_other_way_round():
    v = verdicts(compare.compare(doc(), doc(step_s=0.12), RULES))
    assert v["model/gpt124m/bf16/step_time_median_s"] == "fail"
    v = verdicts(compare.compare(doc(), doc(step_s=0.08), RULES))  # faster is never a failure
    assert v["model/gpt124m/bf16/step_time_median_s"] == "pass"


def test_launch_latency_is_judged_within_10_percent_both_ways():
    assert verdicts(compare.compare(doc(), doc(launch_us=4.0), RULES))["launch/cuda:0/wall_us"] == "fail"
    assert verdicts(compare.compare(doc(), doc(launch_us=5.2), RULES))["launch/cuda:0/wall_us"] == "pass"


def test_an_interval_straddling_the_limit_is_marginal_not_a_sample_decision():
    new = doc()
    # Median 6% below the baseline, but the interval reaches above the 5% limit: not proven bad.
    new["benchmarks"]["collectives"]["rows"][0]["busbw_gbps"] = fig(94.0, spread=0.05)
    rep = compare.compare(doc(), new, RULES)
    assert verdicts(rep)["collectives/all_reduce/1073741824/busbw_gbps"] == "marginal"
    assert rep["verdict"] == "marginal"
    assert compare.compare(doc(), new, RULES, strict=True)["verdict"] == "fail"


def test_a_metric_missing_in_the_new_file_fails():
    new = doc()
    del new["benchmarks"]["model"]
    rep = compare.compare(doc(), new, RULES)
    row = next(r for r in rep["metrics"] if r["metric"] == "model/gpt124m/bf16/samples_per_s")
    assert row["verdict"] == "fail" and "missing" in row["reason"]
    assert rep["verdict"] == "fail"


def test_peer_outlier_inside_one_file_without_baseline():
    rep = compare.compare(None, doc(matmul=(700.0, 705.0, 560.0, 698.0)), RULES)
    assert [(o["device"], round(o["below_pct"])) for o in rep["outliers"]] == [("cuda:2", 20)]
    assert rep["verdict"] == "fail"
    assert compare.compare(None, doc(matmul=(700.0, 690.0, 705.0)), RULES)["outliers"] == []


def test_env_diff_names_the_fields_that_differ_and_ignores_the_host():
    new = doc(driver="590.2", nccl="2.28.1")
    new["env"]["host"] = "node-b"
    rep = compare.compare(doc(), new, RULES)
    assert {d["field"]: (d["baseline"], d["new"]) for d in rep["env_diff"]} == {
        "driver": ("580.1", "590.2"), "nccl": ("2.27.3", "2.28.1")}


def test_speedup_is_new_over_old_for_every_workload():
    rep = compare.compare(doc(), doc(matmul=(1400.0,), busbw=150.0, sps=2500.0), RULES)
    sp = {r["workload"]: r["speedup"] for r in rep["speedup"]}
    assert sp["gpt124m bf16 samples/s"] == pytest.approx(2.5)
    assert sp["matmul bf16 MAMF TFLOPS"] == pytest.approx(2.0)
    assert sp["all_reduce busbw GB/s @ 1073741824 B"] == pytest.approx(1.5)


def _files(tmp_path, base, new):
    a, b = tmp_path / "base.json", tmp_path / "new.json"
    results.save(base, a)
    results.save(new, b)
    return a, b


def test_cli_exit_3_on_a_failing_rule_and_json_with_schema_version(tmp_path):
    a, b = _files(tmp_path, doc(), doc(busbw=50.0))
    res = invoke(["compare", a, b, "--json"])
    assert res.exit_code == 3
    rep = json.loads(res.stdout)
    assert rep["schema_version"] == compare.SCHEMA_VERSION and rep["verdict"] == "fail"
    res = invoke(["compare", a, a])
    assert res.exit_code == 0 and "PASS" in res.stdout


def test_cli_custom_rules_file_changes_the_verdict(tmp_path):
    a, b = _files(tmp_path, doc(), doc(busbw=90.0))
    rules = tmp_path / "loose.yaml"
    rules.write_text("version: 1\nrules:\n  - name: loose\n    metrics: ['collectives/*']\n    max_below_pct: 20\n")
    res = invoke(["compare", a, b, "--rules", rules, "--json"])
    assert res.exit_code == 0
    assert [r["verdict"] for r in json.loads(res.stdout)["metrics"]] == ["pass"]


def test_cli_bad_rules_and_bad_files_are_usage_errors(tmp_path):
    a, b = _files(tmp_path, doc(), doc())
    rules = tmp_path / "bad.yaml"
    rules.write_text("rules:\n  - name: x\n    metrics: ['*']\n")
    res = invoke(["compare", a, b, "--rules", rules])
    assert res.exit_code == 2 and "exactly one of max_below_pct" in res.stderr
    res = invoke(["compare", a, tmp_path / "nope.json"])
    assert res.exit_code == 2 and "does not exist" in res.stderr


def test_cli_list_metrics(tmp_path):
    a, _ = _files(tmp_path, doc(), doc())
    res = invoke(["compare", a, "--list-metrics"])
    assert res.exit_code == 0
    assert "matmul/cuda:0/bf16/8192x8192x8192/tflops" in res.stdout.split()


def test_recorded_cpu_fixture_compares_with_itself(tmp_path):
    from pathlib import Path

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / "cpu-quick.json"
    res = invoke(["compare", fixture, fixture, "--json"])
    assert res.exit_code == 0
    rep = json.loads(res.stdout)
    # A file never fails against itself; CPU noise can leave some metrics marginal (too noisy to prove).
    assert rep["verdict"] in ("pass", "marginal") and rep["counts"]["fail"] == 0
    assert rep["counts"]["pass"] > 0 and not rep["env_diff"] and not rep["outliers"]


def test_a_noisy_baseline_cannot_fail_a_node_on_its_own():
    base, new = doc(), doc()
    base["benchmarks"]["collectives"]["rows"][0]["busbw_gbps"] = fig(100.0, spread=0.2)  # [80, 120]
    new["benchmarks"]["collectives"]["rows"][0]["busbw_gbps"] = fig(93.0, spread=0.005)
    key = "collectives/all_reduce/1073741824/busbw_gbps"
    assert verdicts(compare.compare(base, new, RULES))[key] == "marginal"


@pytest.mark.parametrize("text,needle", [
    ("rules:\n  - name: x\n    metrics: ['*']\n    within_pct: 5\n    within_pc: 1\n", "did you mean 'within_pct'"),
    ("rules:\n  - name: x\n    metrics: ['*']\n    within_pct: 5\n    metric: ['a']\n", "did you mean 'metrics'"),
    ("rules:\n  - {metrics: ['*'], within_pct: 5}\noutliers:\n  max_below_pct: 5\n", "outliers: unknown key"),
])
def test_an_unknown_key_inside_a_rule_is_refused(tmp_path, text, needle):
    a, _ = _files(tmp_path, doc(), doc())
    rules = tmp_path / "r.yaml"
    rules.write_text(text)
    res = invoke(["compare", a, a, "--rules", rules])
    assert res.exit_code == 2 and needle in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
