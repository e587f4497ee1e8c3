"""Activation memory, after Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", arXiv 2205.05198, Sec. 4.1), with each tensor's size from ``tensor_bytes``.

Per transformer layer at 16 bit, with dropout and an MLP of 4h: ``s·b·h·(34 + 5·a·s/h)`` bytes
(attention 11sbh + 5as²b, MLP 19sbh, two LayerNorms 4sbh). Flash/SDPA attention and selective
recomputation never keep the ``5as²b`` score matrices; full recomputation keeps only the layer
input. The general form below reduces to 34 for their setting and also covers a different FFN
width, grouped-query attention, a gated (SwiGLU) MLP, no dropout, and autocast, where the
residual stream (block inputs, LayerNorm inputs) stays fp32 while matmul inputs and outputs are 16-bit.
"""

from __future__ import annotations

from dataclasses import dataclass

from rubin.errors import bad_choice
from rubin.plan.shapes import ModelShape
from rubin.plan.tensor_bytes import size

CHECKPOINTING = ("none", "selective", "full")


def check_checkpointing(mode: str) -> None:
    if mode not in CHECKPOINTING:
        raise bad_choice("activation-checkpointing", mode, CHECKPOINTING)


def sbh_coefficient(hidden: int, heads: int, kv_heads: int | None = None, ffn: int | None = None, *,
                    gated: bool = False, dropout: bool = True, regime: str = "half") -> float:
    """The ``34`` of Korthikanti's formula for this shape: bytes per s·b·h outside the scores."""
    kv_heads = heads if kv_heads is None else kv_heads
    ffn = 4 * hidden if ffn is None else ffn
    mask = size("dropout_mask", regime) if dropout else 0.0
    m_in, m_out = size("matmul_input", regime), size("matmul_output", regime)
    # QKV input; Q, K and V (one storage); the attention output (= the projection's input); its mask
    attention = m_in + m_out * (1 + 2 * kv_heads / heads) + size("attention_output", regime) + mask
    norms = 2 * size("norm_input", regime)
    # MLP: its input, its dropout mask, then each saved ffn-wide tensor (2 for GELU, 3 for SwiGLU)
    mlp = m_in + mask + (3 if gated else 2) * m_out * ffn / hidden
    return attention + norms + mlp


def score_coefficient(dropout: bool = True) -> float:
    """The ``5`` of ``5as²b``: softmax output (2 B), its dropout mask (1 B) and dropped output (2 B)."""
    return 5.0 if dropout else 2.0


def layer_bytes(s: int, b: int, h: int, a: int, *, kv_heads: int | None = None, ffn: int | None = None,
                gated: bool = False, dropout: bool = True, flash: bool = False, checkpointing: str = "none",
                regime: str = "half") -> float:
    """Saved activation bytes of one layer (Korthikanti's terms; per-token statistics are added by ``activations``)."""
    check_checkpointing(checkpointing)
    if checkpointing == "full":
        return size("checkpointed_input", regime) * s * b * h
    per = s * b * h * sbh_coefficient(h, a, kv_heads, ffn, gated=gated, dropout=dropout, regime=regime)
    if not flash and checkpointing == "none":
        per += score_coefficient(dropout) * a * s * s * b * size("matmul_output", regime) / 2
    return per


def _layer_stats(s: int, b: int, a: int, flash: bool, regime: str) -> float:
    """Per-token extras of one layer: two LayerNorms' statistics and the flash kernels' log-sum-exp."""
    return s * b * (2 * size("norm_stats", regime) + (a * size("attention_lse", regime) if flash else 0.0))


FUSED_CHUNK = 8192  # rubin.workloads.fused_loss.DEFAULT_CHUNK (the planner does not import torch code)

@dataclass(frozen=True)
class Activations:
    layers: float  # all layers' saved activations
    recompute: float  # full checkpointing: one layer rebuilt during backward
    extra: float  # outside the layers: inputs, final norm, head input
    logits: float  # the output-layer spike at the start of backward
    block_grad: float = 0.0  # in the first block's backward: the gradient of its widest (ffn) tensor
    fused: bool = False  # the fused loss: ``logits`` is one chunk's, and nothing of it is saved

    @property
    def saved(self) -> float:
        """What autograd holds after forward: layers, extras and the fp32 log-probs (4 of the 12 B per logit)."""
        return self.layers + self.extra + (0.0 if self.fused else self.logits / 3.0)

    @property
    def total(self) -> float:
        """The peak: the logits spike and the recomputed layer never coexist (the head's backward runs
        first and frees the spike before the last block is recomputed)."""
        return self.layers + self.extra + max(self.logits, self.recompute)

    def as_dict(self) -> dict:
        return {"layers_bytes": self.layers, "recompute_bytes": self.recompute, "extra_bytes": self.extra,
                "logits_bytes": self.logits, "block_grad_bytes": self.block_grad, "saved_bytes": self.saved,
                "peak_bytes": self.total, "fused_loss": self.fused}


def activations(model: ModelShape, micro_batch: int, *, checkpointing: str = "none", flash: bool = True,
                regime: str = "half", fused_loss: bool = False) -> Activations:
    """Activation bytes on one GPU for ``micro_batch`` samples (no tensor/pipeline parallelism).

    ``fused_loss``: the head and cross-entropy run in chunks of FUSED_CHUNK tokens (rubin's fused
    loss): the spike is one chunk's logits plus the head's fp32 gradient accumulator, and autograd
    keeps one fp32 log-sum-exp per token instead of the log-probs.
    """
    b = micro_batch
    logit = size("logit", regime)
    if model.kind in ("cnn", "mlp") and model.act_bytes_per_sample is not None:
        # measured from the workload's own autograd graph in each regime; checkpointing is not modeled for these
        saved = model.act_bytes_per_sample[regime] * b
        logits = b * (model.vocab or 0) * logit
        return Activations(saved - logits / 3.0, 0.0, 0.0, logits)
    if model.kind == "measured":
        return _measured(model, b, checkpointing, logit)
    if not model.is_transformer:
        return Activations(0.0, 0.0, 0.0, 0.0)
    s, h, a = model.seq_len or 0, model.hidden or 0, model.heads or 1
    common = dict(kv_heads=model.kv_heads, ffn=model.ffn, gated=model.gated_mlp, dropout=model.dropout,
                  flash=flash, regime=regime)
    full = checkpointing == "full"
    per_layer = layer_bytes(s, b, h, a, checkpointing=checkpointing, **common) + (0.0 if full else _layer_stats(s, b, a, flash, regime))
    recompute = 0.0
    if full:
        recompute = layer_bytes(s, b, h, a, checkpointing="selective" if flash else "none", **common) + _layer_stats(s, b, a, flash, regime)
    rows = s * b if model.lm_head else b  # tokens through the head
    # the final norm saves the whole residual stream even when a classifier normalises only its cls token
    # (x[:, 0] is a view: its storage is all s*b rows)
    extra = s * b * h * size("norm_input", regime) + rows * (h * size("matmul_input", regime) + size("norm_stats", regime) / 2)
    if model.input_bytes_per_sample:  # a vision model's image, saved by its patch embedding
        extra += model.input_bytes_per_sample * b * size("image_input", regime)
    if model.lm_head:
        extra += 2 * s * b * size("token_ids", regime)  # input ids and targets
    logits = rows * (model.vocab or 0) * logit
    fused = bool(fused_loss and model.lm_head and model.vocab)
    if fused:
        logits = min(rows, FUSED_CHUNK) * model.vocab * logit + model.vocab * h * 4
        extra += rows * 4
    # the residual stream's gradient replaces the final norm's (freed) input, same size; the MLP's
    # backward adds an ffn-wide gradient (two for a gated MLP) on top of everything still saved
    block_grad = s * b * (model.ffn or 4 * h) * size("matmul_output", regime) * (2 if model.gated_mlp else 1)
    return Activations(model.layers * per_layer, recompute, extra, logits, block_grad, fused)


def _measured(model: ModelShape, b: int, checkpointing: str, logit: float) -> Activations:
    """Activations from ``plan memory --measure``'s fit, extrapolated to ``b`` samples of ``seq_len`` tokens."""
    fit = model.measured_fit
    s = (model.seq_len or 1) if model.lm_head else 1
    rows = s * b if model.lm_head else b
    logits = rows * (model.vocab or 0) * logit

    def saved(mode: str) -> float:
        k_tok, k_sample, _, k_score = fit[mode]
        return k_tok * b * s + k_sample * b + k_score * b * s * s

    full = checkpointing == "full" and "full" in fit
    recompute = 0.0
    if full and model.layers:  # one block rebuilt: its share of the unchecked saved bytes
        recompute = max(saved("none") - logits / 3.0, 0.0) / model.layers
    return Activations(max(saved("full" if full else "none") - logits / 3.0, 0.0), recompute, 0.0, logits)
