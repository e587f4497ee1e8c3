"""What the planner knows about a model: a parameter count, and for a transformer its shape.

A shape comes from flags, from a Hugging Face style ``config.json``, or from a reference
workload. Parameter counts of a transformer are derived from the shape (GPT-2 style: learned
positions, biases, tied embeddings unless the config says otherwise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from rubin.errors import UsageError, bad_value, load_mapping


@dataclass(frozen=True)
class ModelShape:
    name: str
    params: float
    kind: str = "params"  # params (a raw count) | transformer | cnn | mlp | measured
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    ffn: int | None = None
    vocab: int | None = None  # output classes for a classifier
    seq_len: int | None = None  # tokens (or patches) per sample
    gated_mlp: bool = False  # SwiGLU-style MLP (three matrices)
    dropout: bool = True  # Korthikanti's 34 counts two dropout masks per layer
    largest_layer_params: float | None = None
    # cnn / mlp: bytes autograd saves per sample, by precision regime (fp32, amp, half), measured on
    # the workload's own graph
    act_bytes_per_sample: dict | None = None
    lm_head: bool = True  # logits for every token (a language model) or one row per sample (a classifier)
    input_bytes_per_sample: float = 0.0  # values of a vision model's image, kept by the first layer
    tied_embeddings: bool = False  # the head shares the embedding: its gradient arrives twice
    head_params: float = 0.0  # the output layer's weights (its gradient is the first to appear)
    block_params: float = 0.0  # one transformer block's weights (what checkpointing recomputes with)
    # kind "measured" (plan memory --measure): saved bytes = k_token*b*s + k_sample*b + k_score*b*s^2, per
    # checkpointing mode ("none", "full"), each (k_token, k_sample, fit residual, k_score); and one measured step
    measured_fit: dict | None = None
    measured_check: dict | None = None
    flops_per_sample: float | None = None  # training FLOPs (forward + backward) per sample
    tokens_per_sample: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def is_transformer(self) -> bool:
        return self.kind == "transformer"

    def with_seq_len(self, seq_len: int | None) -> "ModelShape":
        return self if seq_len is None else replace(self, seq_len=seq_len)


def _positive_int(name: str, value) -> int:
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise bad_value(name, value, "a positive integer") from None
    if v <= 0 or v != float(value):
        raise bad_value(name, value, "a positive integer")
    return v


def transformer_block_params(hidden: int, heads: int, kv_heads: int, ffn: int, gated: bool, bias: bool = True) -> int:
    head_dim = hidden // heads
    kv = kv_heads * head_dim
    attn = hidden * hidden * 2 + hidden * kv * 2  # q, o + k, v
    mlp = hidden * ffn * (3 if gated else 2)
    norms = 4 * hidden  # two LayerNorms, weight and bias
    biases = (hidden + 2 * kv + hidden + ffn + hidden) if bias else 0
    return attn + mlp + norms + biases


def transformer(
    *,
    name: str = "transformer",
    layers,
    hidden,
    heads,
    kv_heads=None,
    ffn=None,
    vocab=None,
    seq_len=None,
    gated_mlp: bool = False,
    dropout: bool = True,
    tied_embeddings: bool = True,
    learned_positions: bool = True,
    bias: bool = True,
    params: float | None = None,
) -> ModelShape:
    """Check a transformer shape and count its parameters (unless ``params`` is given)."""
    layers = _positive_int("layers", layers)
    hidden = _positive_int("hidden", hidden)
    heads = _positive_int("heads", heads)
    if hidden % heads:
        raise bad_value("heads", heads, f"a divisor of hidden={hidden}",
                        f"pick heads so that hidden/heads is an integer (e.g. {_divisor_near(hidden, heads)})")
    kv_heads = heads if kv_heads is None else _positive_int("kv_heads", kv_heads)
    if heads % kv_heads:
        raise bad_value("kv_heads", kv_heads, f"a divisor of heads={heads}",
                        "grouped-query attention shares each kv head among heads/kv_heads query heads")
    ffn = 4 * hidden if ffn is None else _positive_int("ffn", ffn)
    vocab = None if vocab is None else _positive_int("vocab", vocab)
    seq_len = None if seq_len is None else _positive_int("seq_len", seq_len)
    block = transformer_block_params(hidden, heads, kv_heads, ffn, gated_mlp, bias)
    embed = (vocab or 0) * hidden
    count = layers * block + embed * (1 if tied_embeddings else 2) + 2 * hidden
    if learned_positions and seq_len:
        count += seq_len * hidden
    return ModelShape(
        name=name,
        params=float(params if params is not None else count),
        kind="transformer",
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        ffn=ffn,
        vocab=vocab,
        seq_len=seq_len,
        gated_mlp=gated_mlp,
        dropout=dropout,
        tied_embeddings=bool(tied_embeddings and vocab),
        head_params=float((vocab or 0) * hidden),
        block_params=float(block),
        # FSDP wraps each block; the (tied) embedding sits in the root unit
        largest_layer_params=float(max(block, embed)),
    )


def _divisor_near(n: int, k: int) -> int:
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    return min(divisors, key=lambda d: abs(d - k))


def raw(params, largest_layer_params=None) -> ModelShape:
    try:
        p = float(params)
    except (TypeError, ValueError):
        raise bad_value("params", params, "a positive number of parameters, e.g. 7e9") from None
    if not (p > 0 and math.isfinite(p)):
        raise bad_value("params", params, "a positive, finite number of parameters", "e.g. --params 7e9")
    notes = ()
    if largest_layer_params is None:
        notes = ("largest layer unknown: the ZeRO-3 gathered-layer buffer is not counted; pass --largest-layer-params",)
    elif not float(largest_layer_params) > 0 or float(largest_layer_params) > p:
        raise bad_value("largest_layer_params", largest_layer_params, f"a positive count no larger than params={p:g}")
    return ModelShape(
        name=f"{p / 1e9:g}B params",
        params=p,
        largest_layer_params=None if largest_layer_params is None else float(largest_layer_params),
        notes=notes,
    )


# Hugging Face config keys by meaning, first match wins (Llama/Mistral/Qwen style, then GPT-2 style)
_HF_KEYS = {
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "heads": ("num_attention_heads", "n_head"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads"),
    "ffn": ("intermediate_size", "n_inner", "ffn_dim", "d_ff"),
    "vocab": ("vocab_size",),
    "seq_len": ("max_position_embeddings", "n_positions", "n_ctx"),
}


def from_hf_config(path: str | Path) -> ModelShape:
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    cfg = load_mapping(p, "config", "pass a Hugging Face config.json (or the folder holding one)")
    if isinstance(cfg.get("text_config"), dict):  # multimodal configs nest the language model
        cfg = {**cfg, **cfg["text_config"]}
    found = {}
    for key, names in _HF_KEYS.items():
        for n in names:
            if cfg.get(n) is not None:
                found[key] = cfg[n]
                break
    missing = [k for k in ("hidden", "layers", "heads") if k not in found]
    if missing:
        raise UsageError(
            f"config={str(path)!r} lacks {', '.join(missing)}: expected keys like {', '.join(_HF_KEYS[missing[0]])}; "
            "pass --hidden/--layers/--heads instead"
        )
    act = str(cfg.get("hidden_act", cfg.get("activation_function", "gelu"))).lower()
    gated = act in ("silu", "swiglu", "swish", "geglu") or "llama" in str(cfg.get("model_type", ""))
    drop = any(float(cfg.get(k) or 0) > 0 for k in ("resid_pdrop", "attn_pdrop", "hidden_dropout", "attention_dropout", "dropout"))
    if gated and "ffn" not in found:
        found["ffn"] = int(8 * int(found["hidden"]) / 3)
    return transformer(
        name=str(cfg.get("_name_or_path") or cfg.get("model_type") or p.parent.name or "config"),
        gated_mlp=gated,
        dropout=drop,
        tied_embeddings=bool(cfg.get("tie_word_embeddings", not gated)),
        learned_positions=str(cfg.get("model_type", "")) in ("gpt2", "gpt_neo", "opt", "bert"),
        bias=not gated,
        **found,
    )
