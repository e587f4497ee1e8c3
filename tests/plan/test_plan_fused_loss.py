"""plan memory --fused-loss: the logits spike becomes one chunk's, and the Llama workloads plan."""

import json

import pytest
from utils import invoke

from rubin.plan.activations import activations
from rubin.plan.reference_shapes import workload


def test_the_fused_loss_replaces_the_full_logits_by_one_chunk():
    gpt = workload("gpt", seq_len=1024)
    plain = activations(gpt, 32, regime="amp")
    fused = activations(gpt, 32, regime="amp", fused_loss=True)
    assert plain.logits == 32 * 1024 * 50304 * 12  # fp32 log-probs, their gradient, the logits' gradient
    assert fused.logits == 8192 * 50304 * 12 + 50304 * 768 * 4  # one chunk, plus the head's fp32 gradient sum
    assert plain.saved - fused.saved == pytest.approx(plain.logits / 3 - 32 * 1024 * 4)  # log-probs out, one lse in
    assert fused.total < 0.6 * plain.total


def test_cli_plans_less_with_the_flag_and_says_so():
    args = ["plan", "memory", "--workload", "gpt", "--gpus", "1", "--micro-batch", "32", "--seq-len", "1024",
            "--precision", "amp-bf16", "--json"]
    plain, fused = invoke(args), invoke([*args, "--fused-loss"])
    assert plain.exit_code == 0 and fused.exit_code == 0, fused.stderr
    p, f = json.loads(plain.stdout), json.loads(fused.stdout)
    assert f["setup"]["fused_loss"] is True and p["setup"]["fused_loss"] is False
    assert f["strategies"][0]["total_bytes"] < 0.7 * p["strategies"][0]["total_bytes"]  # the issue's >= 30% lower


@pytest.mark.parametrize("name, params", [("llama1b", 1.236e9), ("llama8b", 8.03e9)])
def test_llama_workloads_plan(name, params):
    r = invoke(["plan", "memory", "--workload", name, "--gpus", "8", "--micro-batch", "1", "--seq-len", "4096",
                "--gpu", "H200", "--json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["model"]["params"] == pytest.approx(params, rel=2e-3)
    assert doc["model"]["kv_heads"] == 8 and doc["model"]["gated_mlp"] is True
