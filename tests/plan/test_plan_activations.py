"""Activation memory against Korthikanti et al. 2022 (arXiv 2205.05198)."""


from rubin.plan.activations import activations, layer_bytes, sbh_coefficient, score_coefficient
from rubin.plan.model import transformer

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


def test_logits_buffer_counts_every_token_of_a_language_model():
    m = transformer(layers=2, hidden=64, heads=4, vocab=1000, seq_len=128)
    act = activations(m, 2)
    assert act.logits == 128 * 2 * 1000 * (2 + 4 + 4)


def test_full_checkpointing_adds_one_recomputed_layer():
    m = transformer(layers=10, hidden=64, heads=4, vocab=100, seq_len=128, dropout=True)
    act = activations(m, 1, checkpointing="full", flash=True)
    assert act.layers == 10 * 2 * 128 * 64
    assert act.recompute == layer_bytes(128, 1, 64, 4, flash=True)
