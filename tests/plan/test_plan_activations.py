"""Activation memory against Korthikanti et al. 2022 (arXiv 2205.05198)."""


from rubin.plan.activations import activations, layer_bytes, sbh_coefficient, score_coefficient
from rubin.plan.shapes import transformer

S, A, H = 2048, 96, 12288  # GPT-3 175B


def test_gpt3_attention_term_is_80():
    assert score_coefficient() * A * S / H == 80


def test_the_34_for_their_setting():
    # FFN 4h, full multi-head attention, dropout: 11 + 19 + 4 = 34
    assert sbh_coefficient(H, A) == 34


def test_gpt3_layer_bytes_without_recompute():
    # s b h (34 + 5 a s / h) at b = 1: 2048 * 12288 * 114 bytes = 2.87 GB per layer
    assert layer_bytes(S, 1, H, A, flash=False) == S * H * (34 + 80)
    assert round(layer_bytes(S, 1, H, A, flash=False) / 1e9, 2) == 2.87


def test_flash_attention_and_selective_drop_the_score_term():
    assert layer_bytes(S, 1, H, A, flash=True) == 34 * S * H
    assert layer_bytes(S, 1, H, A, flash=False, checkpointing="selective") == 34 * S * H


def test_full_recompute_keeps_only_the_layer_input():
    assert layer_bytes(S, 4, H, A, checkpointing="full") == 2 * S * 4 * H


def test_linear_in_micro_batch():
    assert layer_bytes(S, 8, H, A, flash=False) == 8 * layer_bytes(S, 1, H, A, flash=False)


def test_gqa_and_no_dropout_shrink_the_coefficient():
    # K and V at 1/4 of the heads save 2 * 2 * (3/4) sbh; no dropout saves the two 1-byte masks
    assert sbh_coefficient(H, A, kv_heads=24) == 34 - 3
    assert sbh_coefficient(H, A, dropout=False) == 32


def test_swiglu_keeps_three_ffn_tensors():
    # GELU MLP keeps 2 ffn-wide tensors, SwiGLU 3: + 2 B * ffn/h per sbh
    assert sbh_coefficient(H, A, ffn=4 * H, gated=True) - sbh_coefficient(H, A, ffn=4 * H) == 8


def test_logits_spike_is_12_bytes_per_logit_in_every_precision():
    # rubin's loss upcasts: fp32 log-probs, their gradient and the logits' gradient coexist
    m = transformer(layers=2, hidden=64, heads=4, vocab=1000, seq_len=128)
    for regime in ("fp32", "amp", "half"):
        assert activations(m, 2, regime=regime).logits == 128 * 2 * 1000 * (4 + 4 + 4)


def test_autocast_keeps_the_residual_stream_in_fp32():
    # GPT-2 block without dropout under autocast: LayerNorm inputs 4 + 4, matmul side at 2 bytes:
    # QKV input 2, Q/K/V 6, attention output 2, fc1 input 2, GELU input 8, fc2 input 8 -> 36 (16-bit: 32, fp32: 64)
    assert sbh_coefficient(768, 12, dropout=False, regime="amp") == 36
    assert sbh_coefficient(768, 12, dropout=False, regime="half") == 32
    assert sbh_coefficient(768, 12, dropout=False, regime="fp32") == 64


def test_checkpointed_block_inputs_are_fp32_under_autocast():
    assert layer_bytes(128, 2, 64, 4, checkpointing="full", regime="amp") == 4 * 128 * 2 * 64
    assert layer_bytes(128, 2, 64, 4, checkpointing="full", regime="half") == 2 * 128 * 2 * 64


def test_full_checkpointing_spike_and_recomputed_layer_do_not_add_up():
    m = transformer(layers=10, hidden=64, heads=4, vocab=100, seq_len=128, dropout=True)
    act = activations(m, 1, checkpointing="full", flash=True)
    assert act.layers == 10 * 2 * 128 * 64
    assert act.recompute > layer_bytes(128, 1, 64, 4, flash=True)  # + the per-token norm statistics and lse
    assert act.total == act.layers + act.extra + max(act.logits, act.recompute)
