"""The memory planner: per strategy, the peak bytes of one training step + overhead against the
GPU's usable memory, and the least-sharded strategy that fits.

A step's peak is the largest of its phases, not the sum of everything (``step_phases``): the start
of backward (activations and the logits spike, with autocast's weight copies), the head's gradient,
the last block's backward (recomputed under checkpointing), the end of backward (all gradients),
and the optimizer step (gradients and the foreach temporaries). Weights,
optimizer state and DDP's gradient buckets stay allocated through all of them.

The ladder is DDP -> ZeRO-1 -> ZeRO-2 -> (hybrid shard, on several nodes) -> FSDP full shard ->
FSDP + full activation checkpointing -> CPU offload (slow). Everything is linear in the
micro-batch, so the largest micro-batch that fits is solved, not searched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rubin.errors import bad_value
from rubin.plan import GIB
from rubin.plan.activations import activations, check_checkpointing
from rubin.plan.shapes import ModelShape
from rubin.plan.states import (
    STRATEGY_DESCRIPTIONS,
    STRATEGY_LABELS,
    States,
    bytes_per_param,
    check_conservative,
    host_bytes_per_node,
    model_states,
)
from rubin.plan.tensor_bytes import regime_of, size

SCHEMA_VERSION = 1


@dataclass
class MemoryRequest:
    model: ModelShape
    gpu_memory_bytes: float | None = None  # None: report sizes only, nothing "fits"
    gpu_name: str | None = None
    micro_batch: int = 1
    gpus_per_node: int = 8
    nodes: int = 1
    precision: str = "bf16"  # autocast, as rubin train precision=bf16 (states.PRECISIONS)
    optimizer: str = "adamw"
    checkpointing: str = "none"
    flash: bool = True
    usable_fraction: float = 0.9
    overhead_gib: float = 2.0  # CUDA context, NCCL buffers, allocator fragmentation
    conservative: str | bool | None = None  # None, "deepspeed" or "deepspeed-legacy" (states.CONSERVATIVE)
    host_memory_gib: float | None = None  # CPU memory per node, to check that offloading fits there
    grad_accumulation: int = 1  # > 1: gradients stay allocated through the next micro-batch's forward
    # cuBLAS's workspace, allocated through torch's caching allocator at the first matmul and held, so it is
    # part of max_memory_allocated. None: the CUDA default for compute_capability (32 MiB on Hopper and
    # newer); 0 on a CPU.
    library_workspace_bytes: float | None = None
    compute_capability: str | None = None  # "9.0"; None: assume a current (Hopper or newer) GPU
    fused_loss: bool = False  # rubin's chunked head + cross-entropy: no full logits
    notes: list[str] = field(default_factory=list)

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    def validate(self) -> None:
        for name in ("micro_batch", "gpus_per_node", "nodes", "grad_accumulation"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise bad_value(name.replace("_", "-"), v, "a positive integer")
        self.conservative = check_conservative(self.conservative)
        if not 0 < self.usable_fraction <= 1:
            raise bad_value("usable-fraction", self.usable_fraction, "a fraction in (0, 1]", "e.g. --usable-fraction 0.9")
        if self.host_memory_gib is not None and not (self.host_memory_gib > 0 and math.isfinite(self.host_memory_gib)):
            raise bad_value("host-memory-gib", self.host_memory_gib, "a positive, finite size in GiB")
        if not math.isfinite(self.overhead_gib) or self.overhead_gib < 0:
            raise bad_value("overhead-gib", self.overhead_gib, "zero or more GiB")
        check_checkpointing(self.checkpointing)
        if self.gpu_memory_bytes is not None and not self.gpu_memory_bytes > 0:
            raise bad_value("gpu-memory-gib", self.gpu_memory_bytes / GIB, "a positive size in GiB")
        if self.model.is_transformer and not self.model.seq_len:
            raise bad_value("seq-len", None, "a sequence length for a transformer", "pass --seq-len")


def cublas_workspace_bytes(compute_capability: str | None = None, env: dict | None = None) -> float:
    """torch's cuBLAS workspace per handle and stream: ``CUBLAS_WORKSPACE_CONFIG`` (``:SIZE_KIB:COUNT``
    pairs) when set, else its default, 32 MiB from compute capability 9.0 and 4096 KiB x 2 + 16 KiB x 8
    below. On the recorded H200 this was the -7.8% of the ViT case: a fixed 32 MiB on a 561 MB peak."""
    import os

    raw = (env if env is not None else os.environ).get("CUBLAS_WORKSPACE_CONFIG")
    if raw:
        nums = [int(x) for x in raw.split(":") if x.strip().isdigit()]
        if nums and len(nums) % 2 == 0:
            return float(sum(nums[i] * 1024 * nums[i + 1] for i in range(0, len(nums), 2)))
    major = int(str(compute_capability).split(".")[0]) if compute_capability else 9
    return float(32 * 2**20 if major >= 9 else 4096 * 1024 * 2 + 16 * 1024 * 8)


def workspace_bytes(req: MemoryRequest) -> float:
    if req.library_workspace_bytes is not None:
        return float(req.library_workspace_bytes)
    return cublas_workspace_bytes(req.compute_capability)


def ladder(nodes: int, checkpointing: str, gpus: int | None = None) -> list[str]:
    if gpus == 1:  # nothing to shard across: plain training, then checkpointing, then offload
        return ["single"] + (["fsdp+ac"] if checkpointing != "full" else []) + ["fsdp+ac+offload"]
    rungs = ["ddp", "zero1", "zero2"]
    if nodes > 1:
        rungs.append("hybrid")
    rungs.append("fsdp")
    if checkpointing != "full":
        rungs.append("fsdp+ac")
    rungs.append("fsdp+ac+offload")
    return rungs


def _checkpointing_for(strategy: str, requested: str) -> str:
    return "full" if strategy.startswith("fsdp+ac") else requested


def step_phases(states: States, act, model: ModelShape, regime: str, accumulating: bool, bpp,
                checkpointing: str = "none") -> dict:
    """Bytes allocated at each phase of a step (see the module docstring); the peak is their max."""
    resident = states.resident
    cast = states.cast
    if checkpointing == "full" and model.params and model.block_params:
        # a checkpointed block drops its autocast weight copies after forward (nothing is saved inside
        # it); they come back one block at a time when it is recomputed
        outside = max(model.params - model.layers * model.block_params, 0.0)
        cast = states.cast * outside / model.params
    # the head's weight gradient appears first, while every activation is still held; under autocast
    # the matmul makes it in 16 bit, then it is cast to the fp32 gradient
    head = model.head_params * (bpp.grads + bpp.cast) if states.optimizer_params else 0.0
    grads_then = states.grads if accumulating else 0.0
    tail = model.head_params * size("embedding_grad", regime) if model.tied_embeddings and states.optimizer_params else 0.0
    held = resident + cast + grads_then + act.layers + act.extra
    return {
        "backward_start": held + act.logits,
        "head_gradient": held + head,
        # the last block's backward (recomputed first under checkpointing), the head's gradient made
        "block_backward": held + act.recompute + model.head_params * bpp.grads + act.block_grad,
        "backward_end": resident + states.grads + tail,
        "optimizer_step": resident + states.grads + size("foreach_temp", regime) * states.optimizer_params,
    }


def evaluate(req: MemoryRequest, strategy: str, micro_batch: int | None = None) -> dict:
    """One strategy's bytes per GPU, by component and by phase, and whether it fits."""
    m = req.model
    b = req.micro_batch if micro_batch is None else micro_batch
    bpp = bytes_per_param(req.precision, req.optimizer)
    regime = regime_of(req.precision)
    ckpt = _checkpointing_for(strategy, req.checkpointing)
    states = model_states(strategy, m.params, req.gpus, gpus_per_node=req.gpus_per_node,
                          largest_layer=m.largest_layer_params or 0.0, bpp=bpp, conservative=req.conservative)
    act = activations(m, b, checkpointing=ckpt, flash=req.flash, regime=regime, fused_loss=req.fused_loss)
    accumulating = req.grad_accumulation > 1
    phases = step_phases(states, act, m, regime, accumulating, bpp, ckpt)
    overhead = req.overhead_gib * GIB
    workspace = workspace_bytes(req)
    peak = max(phases.values())
    total = peak + workspace + overhead
    row = {
        "strategy": strategy,
        "label": STRATEGY_LABELS[strategy],
        "description": STRATEGY_DESCRIPTIONS[strategy],
        "activation_checkpointing": ckpt,
        "slow": strategy.endswith("offload"),
        "micro_batch": b,
        "model_states_bytes": states.total,
        "model_states": states.as_dict(),
        "activation_bytes": act.total,
        "activations": act.as_dict(),
        "phases": phases,
        "peak_phase": max(phases, key=phases.get),
        "workspace_bytes": workspace,
        "overhead_bytes": overhead,
        "total_bytes": total,
        "fits": None,
        "headroom_bytes": None,
        "max_micro_batch": None,
    }
    if strategy.endswith("offload"):
        row["host_bytes_per_node"] = host_bytes_per_node(m.params, req.gpus, req.gpus_per_node, bpp)
    budget = budget_bytes(req)
    if budget is not None:
        row["fits"] = total <= budget
        row["fits_without_margin"] = total <= req.gpu_memory_bytes
        if "host_bytes_per_node" in row and req.host_memory_gib is not None:
            row["host_fits"] = row["host_bytes_per_node"] <= req.host_memory_gib * GIB
            row["fits"] = row["fits"] and row["host_fits"]
            row["fits_without_margin"] = row["fits_without_margin"] and row["host_fits"]
        row["headroom_bytes"] = budget - total
        row["margin_bytes"] = req.gpu_memory_bytes - total
        row["max_micro_batch"] = _max_micro_batch(req, strategy, budget)
    return row


def _max_micro_batch(req: MemoryRequest, strategy: str, budget: float) -> int | None:
    """The largest micro-batch whose peak fits: the peak grows with the batch, so bisect."""
    def need(b: int) -> float:
        return evaluate_total(req, strategy, b)

    if need(1) > budget:
        return 0
    if need(2) - need(1) <= 0:  # nothing grows with the batch (a raw parameter count)
        return None
    lo, hi = 1, 2
    while need(hi) <= budget:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if need(mid) <= budget else (lo, mid)
    return lo


def evaluate_total(req: MemoryRequest, strategy: str, micro_batch: int) -> float:
    m = req.model
    regime = regime_of(req.precision)
    bpp = bytes_per_param(req.precision, req.optimizer)
    states = model_states(strategy, m.params, req.gpus, gpus_per_node=req.gpus_per_node,
                          largest_layer=m.largest_layer_params or 0.0, bpp=bpp, conservative=req.conservative)
    ckpt = _checkpointing_for(strategy, req.checkpointing)
    act = activations(m, micro_batch, checkpointing=ckpt, flash=req.flash, regime=regime, fused_loss=req.fused_loss)
    return (max(step_phases(states, act, m, regime, req.grad_accumulation > 1, bpp, ckpt).values())
            + workspace_bytes(req) + req.overhead_gib * GIB)


def budget_bytes(req: MemoryRequest) -> float | None:
    return None if req.gpu_memory_bytes is None else req.gpu_memory_bytes * req.usable_fraction


def plan(req: MemoryRequest) -> dict:
    req.validate()
    rows = [evaluate(req, s) for s in ladder(req.nodes, req.checkpointing, req.gpus)]
    budget = budget_bytes(req)
    out = {
        "schema_version": SCHEMA_VERSION,
        "kind": "rubin.plan.memory",
        "model": _model_dict(req.model),
        "gpu": {"name": req.gpu_name, "memory_bytes": req.gpu_memory_bytes, "usable_fraction": req.usable_fraction,
                "budget_bytes": budget},
        "setup": {"gpus": req.gpus, "gpus_per_node": req.gpus_per_node, "nodes": req.nodes,
                  "micro_batch": req.micro_batch, "precision": req.precision, "optimizer": req.optimizer,
                  "activation_checkpointing": req.checkpointing, "flash_attention": req.flash, "fused_loss": req.fused_loss,
                  "conservative": req.conservative, "overhead_gib": req.overhead_gib},
        "strategies": rows,
        "recommended": None,
        "recommended_max_micro_batch": None,
        "verdict": "",
        "shortfall": None,
        "notes": list(req.model.notes) + list(req.notes),
    }
    if req.model.measured_check and regime_of(req.precision) != "half":
        out["notes"].append(_check_note(req))
    if budget is None:
        out["verdict"] = "no GPU given (--gpu or --gpu-memory-gib): sizes only"
        return out
    fitting = [r for r in rows if r["fits"]]
    if fitting:
        best = fitting[0]
        out["recommended"] = best["strategy"]
        out["recommended_max_micro_batch"] = best["max_micro_batch"]
        out["verdict"] = (f"{best['label']} fits at micro-batch {req.micro_batch} "
                          f"(largest micro-batch that fits: {best['max_micro_batch']})")
        if best["slow"]:
            out["verdict"] += "; CPU offload is slow (PCIe-bound): prefer more GPUs or tensor parallelism"
        out["margin"] = _margin(req, rows, best)
        return out
    smaller = [r for r in rows if r["max_micro_batch"] and r.get("host_fits") is not False]
    if smaller:
        best = smaller[0]
        out["recommended"] = best["strategy"]
        out["recommended_max_micro_batch"] = best["max_micro_batch"]
        out["verdict"] = (f"nothing fits at micro-batch {req.micro_batch}; {best['label']} fits at micro-batch "
                          f"{best['max_micro_batch']} (use gradient accumulation for the global batch)")
        return out
    out["shortfall"] = shortfall(req, rows)
    out["verdict"] = out["shortfall"]["message"]
    return out


def _check_note(req: MemoryRequest) -> str:
    """The phase model at the size --measure ran a full step at: planned against measured peak."""
    from dataclasses import replace

    c = req.model.measured_check
    shape = replace(req.model, seq_len=c["seq_len"]) if req.model.lm_head else req.model
    one = replace(req, model=shape, micro_batch=c["micro_batch"], gpus_per_node=1, nodes=1, optimizer="adamw",
                  overhead_gib=0.0, grad_accumulation=1, notes=[])
    planned = evaluate_total(one, "single", c["micro_batch"])
    return (f"check: a full step at micro-batch {c['micro_batch']}" + (f", seq {c['seq_len']}" if req.model.lm_head else "")
            + f" peaked at {c['peak_bytes'] / 2**20:,.1f} MiB on {c['device']}; the plan says {planned / 2**20:,.1f} MiB "
            f"({planned / c['peak_bytes'] - 1:+.1%})")


def _margin(req: MemoryRequest, rows: list[dict], best: dict) -> dict:
    """The recommended row's margin, and any less-sharded row that fits only inside the safety margin."""
    safety = (1 - req.usable_fraction) * req.gpu_memory_bytes
    tight = [r for r in rows[:rows.index(best)] if r.get("fits_without_margin") and not r["slow"]]
    out = {"safety_margin_bytes": safety, "safety_margin_fraction": 1 - req.usable_fraction,
           "recommended_margin_bytes": best["margin_bytes"],
           "recommended_margin_fraction": best["margin_bytes"] / req.gpu_memory_bytes,
           "tight": None, "text": ""}
    out["text"] = (f"margin: {best['label']} leaves {best['margin_bytes'] / GIB:.1f} GiB "
                   f"({out['recommended_margin_fraction']:.0%} of the GPU); the safety margin kept is "
                   f"{safety / GIB:.1f} GiB ({1 - req.usable_fraction:.0%}, --usable-fraction {req.usable_fraction:g})")
    if tight:
        t = tight[-1]
        out["tight"] = t["strategy"]
        out["text"] += (f"; {t['label']} is tight: it would leave only {t['margin_bytes'] / GIB:.1f} GiB "
                        f"({t['margin_bytes'] / req.gpu_memory_bytes:.0%}), inside the safety margin, so the next "
                        f"strategy that fits, {best['label']}, is recommended")
    return out


def shortfall(req: MemoryRequest, rows: list[dict]) -> dict:
    """Nothing fits even at micro-batch 1: by how much, and what it would take."""
    on_gpu = [r for r in rows if not r["slow"]]
    best = min(on_gpu, key=lambda r: r["total_bytes"])
    one = evaluate(req, best["strategy"], micro_batch=1)
    budget = budget_bytes(req)
    short = one["total_bytes"] - budget
    overhead = one["overhead_bytes"]
    # tensor/pipeline parallelism divides states and activations, not the per-GPU overhead
    room = budget - overhead
    degree = math.inf if room <= 0 else (one["total_bytes"] - overhead) / room
    degree = 2 ** math.ceil(math.log2(degree)) if math.isfinite(degree) and degree > 1 else degree
    need_gib = one["total_bytes"] / req.usable_fraction / GIB
    msg = (f"does not fit: {best['label']} at micro-batch 1 needs {one['total_bytes'] / GIB:.1f} GiB per GPU, "
           f"{short / GIB:.1f} GiB over the {budget / GIB:.1f} GiB usable; use tensor or pipeline parallelism "
           f"of degree >= {degree if math.isfinite(degree) else 'n/a'}, or GPUs with >= {need_gib:.0f} GiB")
    return {"strategy": best["strategy"], "needed_bytes": one["total_bytes"], "short_bytes": short,
            "model_parallel_degree": degree if math.isfinite(degree) else None,
            "gpu_memory_needed_gib": need_gib, "message": msg}


def _model_dict(m: ModelShape) -> dict:
    keys = ("name", "kind", "params", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq_len",
            "gated_mlp", "dropout", "largest_layer_params")
    out = {k: getattr(m, k) for k in keys}
    if m.measured_fit:
        out["measured"] = {"fit": {mode: {"bytes_per_token": f[0], "bytes_per_sample": f[1], "residual": f[2],
                                          "bytes_per_token_squared": f[3]}
                                   for mode, f in m.measured_fit.items()}, "check": m.measured_check}
    return out
