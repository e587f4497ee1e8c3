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
    res = _json(["plan", "memory", "--params", "7.5e9", "--gpus", "64", "--precision", "bf16-mixed", "--json"])
    assert res["schema_version"] == 1
    assert round(_row(res, "ddp")["model_states_bytes"] / 1e9, 1) == 120.0
    assert round(_row(res, "fsdp")["model_states_bytes"] / 1e9, 1) == 1.9
    for row in res["strategies"]:
        assert {"model_states_bytes", "activation_bytes", "total_bytes", "fits"} <= row.keys()
    assert "recommended" in res


def test_memory_deepspeed_conservative_invocation_both_versions():
    base = ["plan", "memory", "--params", "2.851e9", "--largest-layer-params", "32e6", "--gpus", "8", "--precision",
            "bf16-mixed", "--json"]
    legacy = _json(base + ["--conservative", "deepspeed-legacy"])
    assert round(_row(legacy, "zero2")["model_states_bytes"] / 2**30, 2) == 15.93  # the docs' t5-3b example
    current = _json(base + ["--conservative"])
    assert current["setup"]["conservative"] == "deepspeed"
    assert _row(current, "zero2")["model_states_bytes"] == pytest.approx(2 * 2.851e9 + 18 * 2.851e9 / 8)


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


# -- edge inputs (issue: each gets a clean answer) -------------------------------------------------


@pytest.mark.parametrize("args,match", [
    (["--params", "inf"], "params=inf is not valid: a positive, finite number of parameters"),
    (["--params", "nan"], "params=nan"),
    (["--workload", "gpt", "--seq-len", "0"], "seq-len=0 is not valid: a positive number of tokens"),
    (["--params", "1e9", "--gpu-memory-gib", "inf"], "gpu-memory-gib=inf"),
    (["--params", "1e9", "--host-memory-gib", "inf", "--gpu", "H200"], "host-memory-gib=inf"),
    (["--params", "1e9", "--conservative", "deepspeed-0.3"], "allowed are deepspeed, deepspeed-legacy"),
])
def test_edge_inputs_are_refused_in_one_line(args, match):
    r = invoke(["plan", "memory", *args])
    assert r.exit_code == 2, r.stdout
    assert match in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_gpus_12_suggests_a_gpus_per_node_that_divides_it():
    r = invoke(["plan", "memory", "--params", "7e9", "--gpus", "12"])
    assert r.exit_code == 2
    assert "--gpus-per-node 6 (2 nodes)" in r.stderr and "--gpus 8" not in r.stderr
    ok = _json(["plan", "memory", "--params", "7e9", "--gpus", "12", "--gpus-per-node", "6", "--json"])
    assert (ok["setup"]["gpus"], ok["setup"]["nodes"]) == (12, 2)


def test_huge_model_offload_is_checked_against_host_memory_by_default():
    # 1e15 parameters: offload needs 1.5 x 16 B x 1e15 / 1 node = 21.8 PiB of host memory on one node
    res = _json(["plan", "memory", "--params", "1e15", "--largest-layer-params", "1e6", "--gpu", "H200", "--json"])
    off = _row(res, "fsdp+ac+offload")
    assert off["host_fits"] is False and off["fits"] is False
    assert res["recommended"] is None and "does not fit" in res["verdict"]
    assert any("detected on this machine" in n for n in res["notes"])
    # an explicit, large enough host memory lets offload fit
    big = _json(["plan", "memory", "--params", "1e12", "--largest-layer-params", "1e6", "--gpu", "H200",
                 "--host-memory-gib", str(1.5 * 16 * 1e12 / 2**30 + 1), "--json"])
    assert big["recommended"] == "fsdp+ac+offload"


def test_infinite_spot_price_is_refused(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("instances:\n  - {name: a, gpus: 8, gpu: H100-SXM, on_demand_per_hour: 10, spot_per_hour: .inf,"
                 " hazard_per_hour: 0.1}\n")
    r = invoke(["plan", "cost", "--throughput", "100", "--work", "1e6", "--prices", p])
    assert r.exit_code == 2
    assert "instances.0.spot_per_hour=inf is not valid" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_output_into_a_closed_pipe_is_not_an_error():
    """``rubin plan memory ... | head -1`` where the reader is already gone: exit 0, nothing on stderr."""
    import os

    r, w = os.pipe()
    os.close(r)  # the reader left before rubin wrote anything: every write is EPIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "rubin", "plan", "memory", "--params", "7e9", "--gpu", "H200"],
                              stdout=w, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(w)
    assert proc.returncode == 0, proc.stderr
    assert "Error" not in proc.stderr and "Traceback" not in proc.stderr


def test_piping_into_head_keeps_the_first_line():
    out = subprocess.run(f"'{sys.executable}' -m rubin plan memory --params 7e9 --gpu H200 | head -1", shell=True,
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith("rubin plan memory: 7B params")
    assert "Error" not in out.stderr and "Traceback" not in out.stderr


# -- the safety margin --------------------------------------------------------------------------


LLAMA_7B = ["--hidden", "4096", "--layers", "32", "--heads", "32", "--vocab", "32000", "--swiglu", "--ffn", "11008",
            "--seq-len", "4096", "--gpu", "H200", "--gpus", "8"]


def test_llama_7b_on_h200_is_not_ddp_once_the_bucket_copy_counts():
    # the issue: DDP was recommended at 119.8 of 126.9 GiB; its bucket copy (+12.6 GiB) makes it run out of memory
    res = _json(["plan", "memory", *LLAMA_7B, "--precision", "bf16-mixed", "--json"])
    ddp = _row(res, "ddp")
    assert ddp["model_states"]["ddp_bucket_bytes"] == pytest.approx(2 * 6.74e9, rel=0.01)  # bf16 grads, 6.74B params
    assert ddp["fits"] is False
    assert res["recommended"] == "zero1"
    margin = res["margin"]
    assert margin["recommended_margin_bytes"] == pytest.approx(141 * 2**30 - _row(res, "zero1")["total_bytes"])
    assert margin["safety_margin_fraction"] == pytest.approx(0.1)


def test_a_plan_inside_the_margin_is_tight_and_names_the_next_that_fits():
    # pick the GPU size so that DDP fits the raw memory but not the 90% budget
    ddp_total = _row(_json(["plan", "memory", *LLAMA_7B, "--json"]), "ddp")["total_bytes"]
    size_gib = ddp_total / 2**30 / 0.95  # DDP would use 95%: inside the 10% margin
    args = [a for a in LLAMA_7B if a not in ("--gpu", "H200")] + ["--gpu-memory-gib", f"{size_gib:.3f}"]
    res = _json(["plan", "memory", *args, "--json"])
    assert res["margin"]["tight"] == "ddp" and res["recommended"] == "zero1"
    r = invoke(["plan", "memory", *args])
    assert "DDP is tight" in r.stdout and "ZeRO-1, is recommended" in r.stdout
    assert "margin: ZeRO-1 leaves" in r.stdout


def test_the_default_precision_is_one_rubin_train_runs_and_means_the_same():
    import typing

    from rubin.train.config import Config

    train_choices = typing.get_args(Config.model_fields["precision"].annotation)
    plain = _json(["plan", "memory", *LLAMA_7B, "--json"])
    assert plain["setup"]["precision"] == "bf16" and "bf16" in train_choices
    # bf16 is autocast, as `rubin train precision=bf16`: the same plan as the older name amp-bf16
    amp = _json(["plan", "memory", *LLAMA_7B, "--precision", "amp-bf16", "--json"])
    assert amp["setup"]["precision"] == "bf16" and amp["strategies"] == plain["strategies"]
    mixed = _json(["plan", "memory", *LLAMA_7B, "--precision", "bf16-mixed", "--json"])
    assert _row(mixed, "ddp")["model_states_bytes"] != _row(plain, "ddp")["model_states_bytes"]
    assert _row(plain, "ddp")["model_states"]["weights_bytes"] == pytest.approx(4 * 6.74e9, rel=0.01)  # fp32 weights


def test_pure_bf16_has_its_own_name():
    res = invoke(["plan", "memory", "--params", "1e9", "--precision", "pure-bf16", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["setup"]["precision"] == "pure-bf16"
    res = invoke(["plan", "memory", "--params", "1e9", "--precision", "bf16x"])
    assert res.exit_code == 2 and "allowed are bf16, fp16, fp32, bf16-mixed, fp16-mixed, pure-bf16" in res.stderr


@pytest.mark.parametrize("what", ["summary", "bench"])
def test_a_cpu_measurement_is_not_priced_as_a_gpu(tmp_path, what):
    if what == "summary":
        src = tmp_path / "run"
        src.mkdir()
        (src / "summary.json").write_text(json.dumps({"status": "completed", "samples_per_s": 900.0, "world_size": 1,
                                                      "device": "cpu"}))
    else:
        src = tmp_path / "cpu.json"
        src.write_text((ROOT / "tests" / "fixtures" / "bench" / "cpu-quick.json").read_text())
    for cmd in (["cost", "--work", "1e6", "--prices", ROOT / "examples" / "prices.example.yaml"], ["project", "--to", "H200"]):
        res = invoke(["plan", cmd[0], f"--{what}", src, *cmd[1:]])
        assert res.exit_code == 2, res.stdout + res.stderr
        assert "was measured on the CPU, not a GPU" in res.stderr and len(res.stderr.strip().splitlines()) == 1
        assert res.stdout == ""
