"""The advisor's numbers: communication per step, and the pick of an option where the model fits."""

import pytest
from utils import ROOT

from rubin.plan import prices
from rubin.plan.advise import advise, comm_time_per_step
from rubin.plan.cost import CostRequest, plan
from rubin.plan.memory import MemoryRequest
from rubin.plan.shapes import raw
from rubin.plan.throughput import by_hand

EXAMPLE = ROOT / "examples" / "prices.example.yaml"


def test_ddp_allreduce_time_from_busbw():
    # nccl-tests: all-reduce of S bytes over n ranks moves S * 2(n-1)/n at the bus bandwidth
    t = comm_time_per_step(1e9, 8, "ddp", busbw_gbs=100.0, grad_bytes=2.0)
    assert t == pytest.approx(2e9 * 2 * 7 / 8 / 100e9)


def test_fsdp_moves_one_and_a_half_times_the_ddp_traffic():
    ddp = comm_time_per_step(1e9, 8, "ddp", 100.0)
    assert comm_time_per_step(1e9, 8, "fsdp", 100.0) == pytest.approx(1.5 * ddp)
    assert comm_time_per_step(1e9, 1, "ddp", 100.0) == 0.0


def test_advise_skips_cheaper_options_where_the_model_does_not_fit():
    # 70B fully sharded over 8 GPUs: 16 B x 70e9 / 8 = 130 GiB per GPU of states, over an H100's
    # 80 GiB and an H200's 0.9 x 141 GiB (only CPU offload fits there), under a GB300's 288 GiB
    req = MemoryRequest(model=raw(70e9), micro_batch=1, gpus_per_node=8, nodes=1)
    cost = plan(CostRequest(throughput=by_hand(1000.0, "tokens", 1, "H100-SXM"), work=1e10, unit="tokens",
                            prices=prices.load(EXAMPLE), gpus=8, checkpoint_s=60, mc_runs=500, mfu=0.4))
    res = advise(req, cost, busbw_gbs=300.0)
    fits = {o["name"]: o["fits"] for o in res["options"]}
    chosen = next(o for o in res["options"] if o["name"] in res["recommendation"])
    assert chosen["fits"]
    assert fits["example-8xH100"] is False and fits["example-8xH200"] is False
    assert "GB300" in res["recommendation"] or "VR200" in res["recommendation"]
    assert res["dimensions"]["communication"]["comm_fraction"] is not None


def test_gpt_workload_shape_comes_from_the_workload_config():
    from rubin.plan.reference_shapes import workload
    from rubin.workloads.models.gpt import GPTConfig

    m = workload("gpt")
    cfg = GPTConfig()
    assert (m.layers, m.hidden, m.heads, m.vocab, m.seq_len) == (cfg.n_layer, cfg.n_embd, cfg.n_head,
                                                                  cfg.vocab_size, cfg.block_size)
    assert m.params == 124_475_904  # nanoGPT GPT-2 small counting the position table
