"""The memory planner: strategy choice at the fit boundaries, largest micro-batch, shortfall."""

import pytest
from utils import ROOT

from rubin.errors import UsageError
from rubin.plan import GIB
from rubin.plan.memory import MemoryRequest, evaluate, ladder, plan
from rubin.plan.shapes import from_hf_config, raw, transformer

FIX = ROOT / "tests" / "fixtures" / "plan"


def _model():
    return transformer(layers=24, hidden=2048, heads=16, vocab=32000, seq_len=2048)


def _req(**kw):
    base = dict(model=_model(), micro_batch=2, gpus_per_node=8, nodes=1, usable_fraction=1.0, overhead_gib=1.0)
    base.update(kw)
    return MemoryRequest(**base)


def test_ladder_order_and_hybrid_only_on_several_nodes():
    assert ladder(1, "none") == ["ddp", "zero1", "zero2", "fsdp", "fsdp+ac", "fsdp+ac+offload"]
    assert ladder(4, "none")[3] == "hybrid"
    assert "fsdp+ac" not in ladder(1, "full")  # already checkpointing: no separate rung


@pytest.mark.parametrize("strategy", ["ddp", "zero1", "zero2", "fsdp", "fsdp+ac"])
def test_least_sharded_strategy_that_fits_exactly_at_the_boundary(strategy):
    need = evaluate(_req(gpu_memory_bytes=1e15), strategy)["total_bytes"]
    at = plan(_req(gpu_memory_bytes=need))
    assert at["recommended"] == strategy
    order = ladder(1, "none")
    below = plan(_req(gpu_memory_bytes=need - 1))
    assert order.index(below["recommended"]) > order.index(strategy)


def test_max_micro_batch_is_the_largest_that_fits():
    req = _req(gpu_memory_bytes=40 * GIB)
    res = plan(req)
    best = res["recommended"]
    b = res["recommended_max_micro_batch"]
    assert evaluate(req, best, micro_batch=b)["total_bytes"] <= 40 * GIB
    assert evaluate(req, best, micro_batch=b + 1)["total_bytes"] > 40 * GIB


def test_smaller_micro_batch_suggested_when_the_requested_one_fits_nowhere():
    req = _req(gpu_memory_bytes=12 * GIB, micro_batch=64)
    res = plan(req)
    assert res["recommended"] is not None
    assert res["recommended_max_micro_batch"] < 64
    assert "nothing fits at micro-batch 64" in res["verdict"]


def test_nothing_fits_reports_shortfall_and_model_parallel_degree():
    big = transformer(layers=96, hidden=12288, heads=96, vocab=50304, seq_len=2048)  # ~175B
    # on an 8 GiB GPU not even offloading fits: the gathered 1.8B-param layer alone is 7 GB
    res = plan(MemoryRequest(model=big, gpu_memory_bytes=8 * GIB, gpus_per_node=8, nodes=1))
    assert res["recommended"] is None
    short = res["shortfall"]
    assert short["short_bytes"] > 0
    assert short["model_parallel_degree"] >= 2
    assert "tensor or pipeline parallelism" in res["verdict"]


def test_offload_is_flagged_slow():
    res = plan(_req(gpu_memory_bytes=1e15))
    off = [r for r in res["strategies"] if r["strategy"] == "fsdp+ac+offload"][0]
    assert off["slow"] is True and off["host_bytes_per_node"] > 0


def test_heads_must_divide_hidden():
    with pytest.raises(UsageError, match=r"heads=12 is not valid: a divisor of hidden=1000"):
        transformer(layers=2, hidden=1000, heads=12)


def test_heads_must_divide_hidden_in_a_config_file():
    with pytest.raises(UsageError, match="divisor of hidden"):
        from_hf_config(FIX / "bad_heads_config.json")


def test_hf_config_llama_like_parameter_count():
    m = from_hf_config(FIX / "llama_like_config.json")
    # Llama-3-8B: 8.03B parameters as published
    assert m.params == pytest.approx(8.03e9, rel=2e-3)
    assert m.kv_heads == 8 and m.gated_mlp and not m.dropout


def test_gpt2_small_parameter_count():
    # nanoGPT GPT-2 small with vocab 50304, learned positions and tied embeddings: 124.48M
    m = transformer(layers=12, hidden=768, heads=12, vocab=50304, seq_len=1024)
    assert m.params == 124_475_904


def test_raw_params_warns_about_the_unknown_largest_layer():
    assert any("largest layer unknown" in n for n in raw(7e9).notes)


def test_bad_usable_fraction_is_a_usage_error():
    with pytest.raises(UsageError, match="usable-fraction=1.5"):
        plan(_req(gpu_memory_bytes=80 * GIB, usable_fraction=1.5))


def test_offload_needs_host_memory_when_given():
    big = raw(175e9, largest_layer_params=1e8)
    ok = plan(MemoryRequest(model=big, gpu_memory_bytes=24 * GIB, gpus_per_node=8, nodes=1))
    assert ok["recommended"] == "fsdp+ac+offload"
    # 1.5 x 16 B x 175e9 = 3.9 TiB per node of host memory, more than 2 TiB
    short = plan(MemoryRequest(model=big, gpu_memory_bytes=24 * GIB, gpus_per_node=8, nodes=1, host_memory_gib=2048))
    assert short["recommended"] is None and short["shortfall"] is not None
