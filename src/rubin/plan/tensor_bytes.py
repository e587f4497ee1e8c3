"""Bytes per value of every tensor the memory planner counts, with the reason for each size.

This is the one table: ``activations.py`` and ``memory.py`` read their sizes from here. Three
regimes cover the precisions:

- ``fp32``: everything in 4 bytes.
- ``amp``: ``torch.autocast`` over fp32 weights (``bf16``, ``fp16``: what ``rubin train
  precision=bf16`` does; ``amp-bf16`` and ``amp-fp16`` are older names). Only the ops on autocast's
  lower-precision list (linear, matmul, conv, SDPA) run in 16 bit; the residual stream they add into
  stays fp32.
- ``half``: 16-bit weights and activations throughout (``bf16-mixed``, ``fp16-mixed``, ``pure-bf16``).

Each row was checked against the tensors autograd really saves (``plan/measure.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rubin.errors import bad_choice

REGIMES = ("fp32", "amp", "half")


@dataclass(frozen=True)
class Size:
    fp32: float
    amp: float
    half: float
    reason: str

    def __call__(self, regime: str) -> float:
        if regime not in REGIMES:
            raise bad_choice("precision regime", regime, REGIMES)
        return getattr(self, regime)


TABLE: dict[str, Size] = {
    # -- activations saved for backward, per value -------------------------------------------------
    "residual": Size(4, 4, 2, "the residual stream: adds are not autocast ops, so under autocast it stays fp32"),
    "norm_input": Size(4, 4, 2, "each LayerNorm saves its input, a residual-stream tensor: fp32 under autocast"),
    "matmul_input": Size(4, 2, 2, "a linear layer saves its input; autocast saves the 16-bit cast copy it multiplied"),
    "matmul_output": Size(4, 2, 2, "QKV, fc1 and the activation between fc1 and fc2 come out of 16-bit matmuls"),
    "attention_output": Size(4, 2, 2, "SDPA's output, saved once: the projection's input is a view of the same storage"),
    "checkpointed_input": Size(4, 4, 2, "full checkpointing keeps only each block's input, a residual-stream tensor"),
    "dropout_mask": Size(1, 1, 1, "a bool mask per dropped element"),
    "norm_stats": Size(8, 8, 8, "per token and LayerNorm: fp32 mean and reciprocal std"),
    "attention_lse": Size(4, 4, 4, "per token and head: the fp32 log-sum-exp the flash kernels keep for backward"),
    "token_ids": Size(8, 8, 8, "int64 input ids and targets, saved by the embedding and the loss"),
    "image_input": Size(4, 2, 2, "the first conv/patch embedding saves its input (cast to 16 bit under autocast)"),
    # the output-layer spike at the start of backward: fp32 log-probs (saved by log_softmax, because
    # rubin's loss upcasts the logits), their gradient and the gradient of the logits
    "logit": Size(12, 12, 12, "fp32 log-probs + their gradient + the logits' gradient, all alive at once"),
    # -- model states, per parameter ------------------------------------------------------------
    "weight_cast": Size(0, 2, 0, "autocast's 16-bit copy of each weight, kept for backward until its layer is done"),
    "ddp_bucket": Size(1, 1, 1, "DDP's gradient buckets: a second copy of the gradients (times the grad bytes)"),
    "foreach_temp": Size(4, 4, 4, "AdamW's foreach step builds sqrt(v) for every parameter of its shard at once"),
    # measured: with fp32 (and 16-bit) weights the head's gradient is the matmul's own output, which
    # AccumulateGrad cannot add into in place, so the sum is a third tensor; under autocast it is a fresh cast
    "embedding_grad": Size(8, 4, 4, "a tied embedding's second, dense gradient (+ the out-of-place sum where the first can't be reused)"),
}


def size(name: str, regime: str) -> float:
    return TABLE[name](regime)


def regime_of(precision: str) -> str:
    if precision == "fp32":
        return "fp32"
    if precision in ("bf16", "fp16") or precision.startswith("amp-"):  # autocast, as rubin train runs it
        return "amp"
    return "half"
