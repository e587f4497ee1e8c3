"""The memory planner: per strategy, model states + activations + overhead against the GPU's
usable memory, and the least-sharded strategy that fits.

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
from rubin.plan.model import ModelShape
from rubin.plan.states import STRATEGY_DESCRIPTIONS, STRATEGY_LABELS, bytes_per_param, host_bytes_per_node, model_states

SCHEMA_VERSION = 1


@dataclass
class MemoryRequest:
    model: ModelShape
    gpu_memory_bytes: float | None = None  # None: report sizes only, nothing "fits"
    gpu_name: str | None = None
    micro_batch: int = 1
    gpus_per_node: int = 8
    nodes: int = 1
    precision: str = "bf16-mixed"
    optimizer: str = "adamw"
    checkpointing: str = "none"
    flash: bool = True
    usable_fraction: float = 0.9
    overhead_gib: float = 2.0  # CUDA context, NCCL buffers, allocator fragmentation
    conservative: bool = False
    host_memory_gib: float | None = None  # CPU memory per node, to check that offloading fits there
    notes: list[str] = field(default_factory=list)

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    def validate(self) -> None:
        for name in ("micro_batch", "gpus_per_node", "nodes"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise bad_value(name.replace("_", "-"), v, "a positive integer")
        if not 0 < self.usable_fraction <= 1:
            raise bad_value("usable-fraction", self.usable_fraction, "a fraction in (0, 1]", "e.g. --usable-fraction 0.9")
        if self.host_memory_gib is not None and not self.host_memory_gib > 0:
            raise bad_value("host-memory-gib", self.host_memory_gib, "a positive size in GiB")
        if self.overhead_gib < 0:
            raise bad_value("overhead-gib", self.overhead_gib, "zero or more GiB")
        check_checkpointing(self.checkpointing)
        if self.gpu_memory_bytes is not None and not self.gpu_memory_bytes > 0:
            raise bad_value("gpu-memory-gib", self.gpu_memory_bytes / GIB, "a positive size in GiB")
        if self.model.is_transformer and not self.model.seq_len:
            raise bad_value("seq-len", None, "a sequence length for a transformer", "pass --seq-len")


def ladder(nodes: int, checkpointing: str) -> list[str]:
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


def evaluate(req: MemoryRequest, strategy: str, micro_batch: int | None = None) -> dict:
    """One strategy's bytes per GPU, by component, and whether it fits."""
    m = req.model
    b = req.micro_batch if micro_batch is None else micro_batch
    bpp = bytes_per_param(req.precision, req.optimizer)
    act_bytes = 4.0 if req.precision == "fp32" else 2.0
    ckpt = _checkpointing_for(strategy, req.checkpointing)
    states = model_states(strategy, m.params, req.gpus, gpus_per_node=req.gpus_per_node,
                          largest_layer=m.largest_layer_params or 0.0, bpp=bpp, conservative=req.conservative)
    act = activations(m, b, checkpointing=ckpt, flash=req.flash, bytes_per_value=act_bytes)
    per_sample = activations(m, 1, checkpointing=ckpt, flash=req.flash, bytes_per_value=act_bytes).total
    overhead = req.overhead_gib * GIB
    total = states.total + act.total + overhead
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
        if "host_bytes_per_node" in row and req.host_memory_gib is not None:
            row["host_fits"] = row["host_bytes_per_node"] <= req.host_memory_gib * GIB
            row["fits"] = row["fits"] and row["host_fits"]
        row["headroom_bytes"] = budget - total
        free = budget - states.total - overhead
        if per_sample > 0:
            row["max_micro_batch"] = max(int(math.floor(free / per_sample + 1e-9)), 0)
        else:
            row["max_micro_batch"] = None if free >= 0 else 0
    return row


def budget_bytes(req: MemoryRequest) -> float | None:
    return None if req.gpu_memory_bytes is None else req.gpu_memory_bytes * req.usable_fraction


def plan(req: MemoryRequest) -> dict:
    req.validate()
    rows = [evaluate(req, s) for s in ladder(req.nodes, req.checkpointing)]
    budget = budget_bytes(req)
    out = {
        "schema_version": SCHEMA_VERSION,
        "kind": "rubin.plan.memory",
        "model": _model_dict(req.model),
        "gpu": {"name": req.gpu_name, "memory_bytes": req.gpu_memory_bytes, "usable_fraction": req.usable_fraction,
                "budget_bytes": budget},
        "setup": {"gpus": req.gpus, "gpus_per_node": req.gpus_per_node, "nodes": req.nodes,
                  "micro_batch": req.micro_batch, "precision": req.precision, "optimizer": req.optimizer,
                  "activation_checkpointing": req.checkpointing, "flash_attention": req.flash,
                  "conservative": req.conservative, "overhead_gib": req.overhead_gib},
        "strategies": rows,
        "recommended": None,
        "recommended_max_micro_batch": None,
        "verdict": "",
        "shortfall": None,
        "notes": list(req.model.notes) + list(req.notes),
    }
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
    return {k: getattr(m, k) for k in keys}
