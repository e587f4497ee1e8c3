"""Activation memory, after Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", arXiv 2205.05198, Sec. 4.1).

Per transformer layer at 16 bit, with dropout and an MLP of 4h: ``s·b·h·(34 + 5·a·s/h)`` bytes
(attention 11sbh + 5as²b, MLP 19sbh, two LayerNorms 4sbh). Flash/SDPA attention and selective
recomputation never keep the ``5as²b`` score matrices; full recomputation keeps only the layer
input, ``2sbh``. The general form below reduces to 34 for their setting and also covers a
different FFN width, grouped-query attention, a gated (SwiGLU) MLP and no dropout.
"""

from __future__ import annotations

from dataclasses import dataclass

from rubin.errors import UsageError, did_you_mean
from rubin.plan.model import ModelShape

CHECKPOINTING = ("none", "selective", "full")


def check_checkpointing(mode: str) -> None:
    if mode not in CHECKPOINTING:
        raise UsageError(f"activation-checkpointing={mode!r} is not valid{did_you_mean(mode, CHECKPOINTING)}: "
                         f"allowed are {', '.join(CHECKPOINTING)}")


def sbh_coefficient(hidden: int, heads: int, kv_heads: int | None = None, ffn: int | None = None, *,
                    gated: bool = False, dropout: bool = True) -> float:
    """The ``34`` of Korthikanti's formula for this shape: bytes per s·b·h outside the scores."""
    kv_heads = heads if kv_heads is None else kv_heads
    ffn = 4 * hidden if ffn is None else ffn
    mask = 1.0 if dropout else 0.0  # a dropout mask is 1 byte per element
    attention = 2 + 2 + 2 * 2 * kv_heads / heads + 2 + mask  # QKV input, Q, K and V, proj input, mask
    norms = 2 + 2  # the inputs of both LayerNorms
    # MLP: its input, then 2 B per element of each saved ffn-wide tensor (2 for GELU, 3 for SwiGLU)
    mlp = 2 + mask + (3 if gated else 2) * 2 * ffn / hidden
    return attention + norms + mlp


def score_coefficient(dropout: bool = True) -> float:
    """The ``5`` of ``5as²b``: softmax output (2 B), its dropout mask (1 B) and dropped output (2 B)."""
    return 5.0 if dropout else 2.0


def layer_bytes(s: int, b: int, h: int, a: int, *, kv_heads: int | None = None, ffn: int | None = None,
                gated: bool = False, dropout: bool = True, flash: bool = False, checkpointing: str = "none",
                bytes_per_value: float = 2.0) -> float:
    """Saved activation bytes of one layer. ``bytes_per_value`` 2 for 16-bit, 4 for fp32 training."""
    check_checkpointing(checkpointing)
    scale = bytes_per_value / 2.0
    if checkpointing == "full":
        return 2.0 * s * b * h * scale
    per = s * b * h * sbh_coefficient(h, a, kv_heads, ffn, gated=gated, dropout=dropout)
    if not flash and checkpointing == "none":
        per += score_coefficient(dropout) * a * s * s * b
    return per * scale


@dataclass(frozen=True)
class Activations:
    layers: float  # all layers' saved activations
    recompute: float  # full checkpointing: one layer rebuilt during backward
    extra: float  # outside the layers: final norm, head input
    logits: float  # the output-layer spike

    @property
    def total(self) -> float:
        return self.layers + self.recompute + self.extra + self.logits

    def as_dict(self) -> dict:
        return {"layers_bytes": self.layers, "recompute_bytes": self.recompute, "extra_bytes": self.extra, "logits_bytes": self.logits}


def activations(model: ModelShape, micro_batch: int, *, checkpointing: str = "none", flash: bool = True,
                bytes_per_value: float = 2.0) -> Activations:
    """Activation bytes on one GPU for ``micro_batch`` samples (no tensor/pipeline parallelism)."""
    b = micro_batch
    scale = bytes_per_value / 2.0
    if model.kind in ("cnn", "mlp") and model.act_bytes_per_sample_16bit is not None:
        # measured from the workload's own autograd graph; checkpointing is not modeled for these
        saved = model.act_bytes_per_sample_16bit * b * scale
        logits = b * (model.vocab or 0) * (bytes_per_value + 8)
        return Activations(saved, 0.0, 0.0, logits)
    if not model.is_transformer:
        return Activations(0.0, 0.0, 0.0, 0.0)
    s, h, a = model.seq_len or 0, model.hidden or 0, model.heads or 1
    common = dict(kv_heads=model.kv_heads, ffn=model.ffn, gated=model.gated_mlp, dropout=model.dropout,
                  flash=flash, bytes_per_value=bytes_per_value)
    per_layer = layer_bytes(s, b, h, a, checkpointing=checkpointing, **common)
    recompute = layer_bytes(s, b, h, a, checkpointing="selective" if flash else "none", **common) if checkpointing == "full" else 0.0
    extra = 4.0 * s * b * h * scale + model.input_bytes_per_sample * b * scale  # final norm and head inputs
    # logits: the 16-bit output, the fp32 log-softmax cross-entropy keeps for backward, and its fp32 gradient
    rows = s * b if model.lm_head else b
    logits = rows * (model.vocab or 0) * (bytes_per_value + 4 + 4)
    return Activations(model.layers * per_layer, recompute, extra, logits)
