"""``rubin plan`` end to end through the CLI, with --json, and its one-line errors."""

import json
import subprocess
import sys

import pytest

from utils import ROOT, invoke

FIX = ROOT / "tests" / "fixtures" / "plan"
EXAMPLE = ROOT / "examples" / "prices.example.yaml"


def _json(args):
    r = invoke(args)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def _row(res, strategy):
    return next(r for r in res["strategies"] if r["strategy"] == strategy)


def test_memory_zero_paper_invocation():
    res = _json(["plan", "memory", "--params", "7.5e9", "--gpus", "64", "--json"])
    assert res["schema_version"] == 1
    assert round(_row(res, "ddp")["model_states_bytes"] / 1e9, 1) == 120.0
    assert round(_row(res, "fsdp")["model_states_bytes"] / 1e9, 1) == 1.9
    for row in res["strategies"]:
        assert {"model_states_bytes", "activation_bytes", "total_bytes", "fits"} <= row.keys()
    assert "recommended" in res


def test_memory_deepspeed_conservative_invocation():
    res = _json(["plan", "memory", "--params", "2.851e9", "--largest-layer-params", "32e6", "--gpus", "8",
                 "--conservative", "--json"])
    assert round(_row(res, "zero2")["model_states_bytes"] / 2**30, 2) == 15.93


def test_memory_gpt_on_h200_invocation():
    res = _json(["plan", "memory", "--workload", "gpt", "--gpu", "H200", "--micro-batch", "8", "--seq-len", "2048",
                 "--json"])
    assert res["recommended"] == "ddp"  # 124M parameters fit anywhere
    ddp = _row(res, "ddp")
    assert ddp["fits"] is True and ddp["activation_bytes"] > ddp["model_states_bytes"]
    assert res["recommended_max_micro_batch"] > 8


def test_memory_human_output_names_the_recommendation():
    r = invoke(["plan", "memory", "--hidden", "4096", "--layers", "32", "--heads", "32", "--vocab", "32000",
                "--seq-len", "4096", "--gpus", "8", "--gpu", "H100-SXM", "--micro-batch", "2"])
    assert r.exit_code == 0, r.stderr
    assert "fits at micro-batch" in r.stdout


def test_cost_invocation_json_shape():
    res = _json(["plan", "cost", "--throughput", "1000", "--unit", "samples", "--work", "3.6e7", "--prices",
                 EXAMPLE, "--checkpoint-seconds", "300", "--json"])
    assert res["schema_version"] == 1 and len(res["options"]) == 4
    ranks = sorted(o["rank"] for o in res["options"])
    assert ranks == [1, 2, 3, 4]
    for o in res["options"]:
        assert {"hours", "on_demand_cost", "spot", "rank"} <= o.keys()
        if o["spot"]:
            assert {"expected_hours", "expected_cost", "p90_cost", "expected_preemptions", "checkpoint_interval_s",
                    "break_even_hazard_per_hour"} <= o["spot"].keys()


def test_project_invocation():
    res = _json(["plan", "project", "--throughput", "1000", "--measured-gpu", "H100-SXM", "--mfu", "0.4",
                 "--to", "VR200", "--actual", "2500", "--json"])
    p = res["projections"][0]
    assert p["kind"] == "projection" and p["speedup"]["low"] < p["speedup"]["high"]
    assert "error_mid" in p["error"]


def test_advise_picks_an_option_that_fits():
    res = _json(["plan", "advise", "--params", "7e9", "--prices", EXAMPLE, "--throughput", "3000", "--unit", "tokens",
                 "--measured-gpu", "H100-SXM", "--work", "1e9", "--busbw-gbs", "400", "--json"])
    assert set(res["dimensions"]) == {"model_scale", "job_duration", "communication", "budget"}
    assert res["memory"]["recommended"] is not None
    assert len(res["reasons"]) >= 4


@pytest.mark.parametrize("args,match", [
    (["plan", "memory", "--params", "1e9", "--gpu", "H20O"], "did you mean 'H200'"),
    (["plan", "memory", "--hidden", "1000", "--heads", "12", "--layers", "2", "--seq-len", "128"], "heads=12"),
    (["plan", "memory", "--params", "-5"], "params=-5"),
    (["plan", "cost", "--throughput", "100", "--work", "1e6", "--prices", FIX / "prices_negative_hazard.yaml"],
     "hazard_per_hour=-0.5"),
    (["plan", "cost", "--throughput", "100", "--work", "1e6", "--prices", FIX / "prices_zero_price.yaml"],
     "on_demand_per_hour=0"),
    (["plan", "cost", "--throughput", "100", "--work", "1e6", "--prices", FIX / "prices_unknown_key.yaml"],
     "unknown key"),
    (["plan", "cost", "--bench", FIX / "bench_wrong_schema.json", "--work", "1e6", "--prices", EXAMPLE],
     "schema_version=7"),
    (["plan", "cost", "--throughput", "0", "--work", "1e6", "--prices", EXAMPLE], "throughput=0"),
    (["plan", "memory", "--params", "1e9", "--optimizer", "adamw8bit"], "did you mean 'adam8bit'"),
    (["plan", "memory", "--params", "1e9", "--gpu", "H100"], "ambiguous"),
])
def test_bad_input_is_one_line_exit_2(args, match):
    r = invoke(args)
    assert r.exit_code == 2
    assert match in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_plan_does_not_import_torch():
    code = ("import sys; from rubin.cli import main; "
            "rc = main(['plan', 'memory', '--params', '7e9', '--gpus', '8', '--gpu', 'H100-SXM', '--json']); "
            "assert rc == 0; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "False", out.stderr
