"""Model states per GPU against the ZeRO paper (Fig. 1) and DeepSpeed's documented estimator output."""

import pytest

from rubin.errors import UsageError
from rubin.plan import GB, GIB
from rubin.plan.states import bytes_per_param, model_states

PSI, N = 7.5e9, 64


@pytest.mark.parametrize("strategy,gb", [("ddp", 120.0), ("zero1", 31.4), ("zero2", 16.6), ("fsdp", 1.9)])
def test_zero_paper_figure_1(strategy, gb):
    # Rajbhandari et al. 2019, Fig. 1: Psi = 7.5B, N_d = 64, K = 12 (mixed-precision Adam)
    states = model_states(strategy, PSI, N)
    assert round(states.total / GB, 1) == gb


def test_mixed_adam_is_16_bytes_per_param():
    b = bytes_per_param("bf16-mixed", "adamw")
    assert (b.weights, b.grads, b.optimizer) == (2, 2, 12)


@pytest.mark.parametrize("optimizer,k", [("sgd-momentum", 8), ("adam8bit", 6), ("sgd", 4)])
def test_optimizer_state_bytes(optimizer, k):
    # fp32 master (4 B) + momentum 4 B; 8-bit Adam 2 x 1 B; plain SGD keeps only the master
    assert bytes_per_param("bf16-mixed", optimizer).optimizer == k


def test_fp32_adam_keeps_no_master_copy():
    b = bytes_per_param("fp32", "adamw")
    assert (b.weights, b.grads, b.optimizer) == (4, 4, 8)


# DeepSpeed docs (memory.rst), t5-3b: 2851M params, 32M largest layer, 1 node x 8 GPUs:
#   estimate_zero2_model_states_mem_needs_all_cold -> 15.93GB per GPU (offload_optimizer=none)
#   estimate_zero3_model_states_mem_needs_all_cold -> 6.10GB (no offload), 0.12GB (param+optimizer offload)
P_T5, L_T5 = 2851e6, 32e6


def test_conservative_legacy_zero2_matches_the_deepspeed_docs_example():
    s = model_states("zero2", P_T5, 8, largest_layer=L_T5, conservative="deepspeed-legacy")
    assert round(s.total / GIB, 2) == 15.93


@pytest.mark.parametrize("strategy", ["zero1", "zero2"])
def test_conservative_zero1_2_match_deepspeed_0_19_8(strategy):
    # stage_1_and_2.py estimate_zero2_model_states_mem_needs, offload none: 2P + int(18P/N)
    s = model_states(strategy, P_T5, 8, largest_layer=L_T5, conservative="deepspeed")
    assert s.total == pytest.approx(2 * P_T5 + int(18 * P_T5 / 8), abs=1)
    assert model_states(strategy, P_T5, 8, conservative=True).total == s.total  # a bare --conservative


def test_unknown_conservative_version_is_refused():
    with pytest.raises(UsageError, match=r"conservative='deepspeed-0\.9' is not valid.*allowed are deepspeed, deepspeed-legacy"):
        model_states("zero2", P_T5, 8, conservative="deepspeed-0.9")


def test_conservative_zero3_matches_deepspeed():
    s = model_states("fsdp", P_T5, 8, largest_layer=L_T5, conservative=True)
    # 4L + 18P/N; the docs fed the live model's exact counts, here rounded to millions
    assert s.total / GIB == pytest.approx(6.10, abs=0.01)


def test_conservative_offload_matches_deepspeed():
    s = model_states("fsdp+ac+offload", P_T5, 8, largest_layer=L_T5, conservative=True)
    assert round(s.total / GIB, 2) == 0.12


def test_zero3_counts_the_gathered_largest_layer():
    # 16P/N plus the unsharded 16-bit weights and gradients of the largest layer (4 B/param)
    s = model_states("fsdp", 1e9, 8, largest_layer=1e8)
    assert s.total == pytest.approx(16e9 / 8 + 4e8)


def test_hybrid_shards_inside_a_node_only():
    hybrid = model_states("hybrid", 1e9, 64, gpus_per_node=8)
    full_in_node = model_states("fsdp", 1e9, 8)
    assert hybrid.total == full_in_node.total == pytest.approx(2e9)
