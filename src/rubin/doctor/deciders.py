"""Facts read from the message itself that decide between two entries a word match cannot tell apart.

Each decider returns, per entry id, a ``Decision``: a score factor (below 1 rules the entry down), an
added score (a decided entry needs no pattern of its own) and the fact, in words, that the explanation
prints as the reason. An OOM is fragmentation only when the reserved-but-unallocated memory in its
numbers is a real share of the GPU, never because of the hint PyTorch appends to every OOM.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Decision:
    factor: float = 1.0
    bonus: float = 0.0
    fact: str = ""


FRAGMENTED_SHARE = 0.10  # reserved but unallocated above 10% of the GPU and larger than the request: fragmentation

_UNIT = {"b": 1 / 2**30, "kib": 1 / 2**20, "mib": 1 / 1024, "gib": 1.0, "tib": 1024.0, "kb": 1 / 2**20, "mb": 1 / 1024,
         "gb": 1.0}
_SIZE = r"([\d.]+) ?([KMGT]i?B|B)"
_TOTAL = (re.compile(rf"total capacity of {_SIZE}", re.I), re.compile(rf"{_SIZE} total capacity", re.I))
_UNALLOCATED = re.compile(rf"{_SIZE} is reserved by PyTorch but unallocated", re.I)
_RESERVED = re.compile(rf"{_SIZE} reserved in total by PyTorch", re.I)
_ALLOCATED = re.compile(rf"{_SIZE} (?:already allocated|is allocated by PyTorch)", re.I)
_REQUEST = re.compile(rf"Tried to allocate {_SIZE}", re.I)


def _gib(m: re.Match | None) -> float | None:
    return float(m.group(1)) * _UNIT[m.group(2).lower()] if m else None


def _fmt(gib: float) -> str:
    return f"{gib:.2f} GiB" if gib >= 1 else f"{gib * 1024:.1f} MiB"


def oom(text: str) -> dict[str, Decision]:
    """cuda_oom vs cuda_oom_fragmentation from the numbers in a CUDA OOM message."""
    total = _gib(_TOTAL[0].search(text) or _TOTAL[1].search(text))
    unallocated = _gib(_UNALLOCATED.search(text))
    if unallocated is None:  # the older message: reserved in total minus already allocated
        reserved, allocated = _gib(_RESERVED.search(text)), _gib(_ALLOCATED.search(text))
        if reserved is not None and allocated is not None:
            unallocated = max(reserved - allocated, 0.0)
    if unallocated is None:
        return {}
    whole = "GPU"
    if not total:  # a paste without the capacity line: the memory PyTorch holds is the smaller whole
        allocated = _gib(_ALLOCATED.search(text))
        if not allocated:
            return {}
        total, whole = allocated + unallocated, "memory PyTorch holds"
    allocated = _gib(_ALLOCATED.search(text)) or 0.0
    if allocated + unallocated > total * 1.05:
        return {}  # numbers that cannot all be true (seen on Windows shared memory): they decide nothing
    request = _gib(_REQUEST.search(text)) or 0.0
    share = unallocated / total
    numbers = f"reserved but unallocated {_fmt(unallocated)} = {share:.2%} of the {_fmt(total)} {whole}"
    if share >= FRAGMENTED_SHARE and unallocated >= request:
        asked = f", more than the {_fmt(request)} requested" if request else ""
        fact = f"{numbers}{asked}: the free memory is there but in pieces"
        return {"cuda_oom_fragmentation": Decision(bonus=3.0, fact=fact), "cuda_oom": Decision(factor=0.5, fact=fact)}
    asked = f" and more than the {_fmt(request)} requested" if request else ""
    fact = f"{numbers} (fragmentation needs >= {FRAGMENTED_SHARE:.0%}{asked}): the step does not fit"
    return {"cuda_oom": Decision(bonus=1.0, fact=fact), "cuda_oom_fragmentation": Decision(factor=0.1, fact=fact)}


_KEYS = re.compile(r"(Missing|Unexpected) key\(s\) in state_dict:\s*\"([^\"]+)\"")
_KEY_LISTS = re.compile(r"(?:Missing|Unexpected) key\(s\) in state_dict:((?:\s*\"[^\"]+\",?)+)")
_WRAPPERS = ("module.", "_orig_mod.", "model.")
_SIZES = re.compile(r"size mismatch for ([\w.]+): copying a param with shape torch\.Size\(\[([\d, ]*)\]\) from checkpoint,"
                    r" the shape in current model is torch\.Size\(\[([\d, ]*)\]\)")
_HEAD = re.compile(r"(^|\.)(fc|head|heads|classifier|cls|logits|score|last_linear|out_proj|linear|decoder)(\.\d+)?\.(weight|bias)$")


def state_dict(text: str) -> dict[str, Decision]:
    """A wrapper prefix (DDP's module., compile's _orig_mod.) vs another architecture, from the first keys;
    a head with another number of classes vs another model, from the size-mismatch shapes."""
    out: dict[str, Decision] = {}
    keys = {kind: key for kind, key in _KEYS.findall(text)}
    listed = [k for group in _KEY_LISTS.findall(text) for k in re.findall(r'"([^"]+)"', group)]
    if listed and all(k.endswith("num_batches_tracked") for k in listed):
        fact = (f"only BatchNorm's num_batches_tracked buffers differ ({len(listed)} listed): the checkpoint and the model"
                " come from either side of torch 0.4.1 (or track_running_stats differs), not a renamed model;"
                " load with strict=False")
        out = {"ckpt_missing_keys": Decision(2.0, 1.0, fact), "ckpt_module_prefix": Decision(0.3, 0.0, fact)}
    elif len(keys) == 2:
        missing, unexpected = keys["Missing"], keys["Unexpected"]
        bare_m, bare_u = _bare(missing), _bare(unexpected)
        if missing != unexpected and bare_m == bare_u:
            fact = f"the keys differ only by a wrapper prefix: missing {missing!r}, unexpected {unexpected!r}"
            out = {"ckpt_module_prefix": Decision(2.0, 1.0, fact), "ckpt_missing_keys": Decision(0.3, 0.0, fact)}
        else:
            fact = f"the keys differ beyond a prefix: missing {missing!r}, unexpected {unexpected!r}"
            out = {"ckpt_module_prefix": Decision(0.3, 0.0, fact), "ckpt_missing_keys": Decision(2.0, 1.0, fact)}
    elif len(keys) == 1 and any(_bare(k) != k for k in keys.values()):
        kind, key = next(iter(keys.items()))
        fact = f"{kind.lower()} key {key!r} carries a wrapper prefix"
        out = {"ckpt_module_prefix": Decision(2.0, 1.0, fact), "ckpt_missing_keys": Decision(0.5, 0.0, fact)}
    sizes = _SIZES.findall(text)
    if sizes:
        heads = [s for s in sizes if _HEAD.search(s[0])]
        name, saved, current = sizes[0]
        if len(heads) == len(sizes):
            fact = f"only the head differs: {name} is [{saved}] in the checkpoint, [{current}] in the model (another number of classes)"
        else:
            fact = f"{len(sizes)} parameter(s) differ in shape, first {name}: [{saved}] saved, [{current}] now"
        out["ckpt_size_mismatch"] = Decision(1.5, 1.0, fact)
    return out


def _bare(key: str) -> str:
    for w in _WRAPPERS:
        key = key.removeprefix(w)
    return key


_SCALES = re.compile(r"(?:reducing to|reducing loss scale to) ([\d.e+-]+)", re.I)


def loss_scale(text: str) -> dict[str, Decision]:
    """fp16 loss scaling: harmless calibration while the scale stays high, a real overflow when it hits its floor."""
    if re.search(r"loss scale already at minimum", text, re.I):
        return {"fp16_loss_scale": Decision(1.0, 0.5, "the loss scale reached its minimum: the gradients overflow fp16"
                                                      " at any scale (use bf16, lower the learning rate)")}
    scales = []
    for v in _SCALES.findall(text):
        try:
            scales.append(float(v))
        except ValueError:
            continue
    if not scales:
        return {}
    last = scales[-1]
    if last <= 1:
        fact = f"the loss scale fell to {last:g} after {len(scales)} skipped step(s): fp16 cannot hold these gradients"
    else:
        fact = (f"the loss scale is still {last:g} after {len(scales)} skipped step(s): calibration, harmless"
                " unless it keeps falling toward 1")
    return {"fp16_loss_scale": Decision(1.0, 0.5, fact)}


_NODE_CONFIG = re.compile(r"Requested node configuration is not available", re.I)
_GPU_REQUEST = re.compile(r"--gres\b|--gpus|\bgres[=:/]|\bgpu:\w", re.I)


def slurm(text: str) -> dict[str, Decision]:
    """"Requested node configuration is not available": GPUs the partition lacks, or CPUs, memory or nodes."""
    if not _NODE_CONFIG.search(text):
        return {}
    gpus = _GPU_REQUEST.search(text)
    if gpus:
        fact = f"the request asks for GPUs ({gpus.group(0)}...) and no node of the partition has them"
        return {"slurm_gres": Decision(1.0, 1.0, fact), "slurm_node_config": Decision(0.5, 0.0, fact)}
    fact = "the request names no GPUs: its CPUs, memory, features or node count exceed every node of the partition"
    return {"slurm_node_config": Decision(1.0, 1.0, fact), "slurm_gres": Decision(0.5, 0.0, fact)}


_CPU_TENSOR = re.compile(r"Tensors must be CUDA and dense|No backend type associated with device type cpu", re.I)
_DDP_INIT = re.compile(r"distributed\.py\", line \d+, in __init__|_sync_module_states|_sync_params_and_buffers"
                       r"|_distributed_broadcast_coalesced|_verify_param_shape_across_processes")


def cpu_tensor(text: str) -> dict[str, Decision]:
    """NCCL got a CPU tensor: in DDP's constructor (the model was wrapped before it moved) or in a collective."""
    if not _CPU_TENSOR.search(text):
        return {}
    where = _DDP_INIT.search(text)
    if not where:
        return {}
    fact = f"the CPU tensor reached NCCL inside DDP's constructor ({where.group(0)}): the model was wrapped before .cuda()"
    return {"ddp_module_on_cpu": Decision(1.0, 2.0, fact), "nccl_cpu_tensor": Decision(0.5, 0.0, fact)}


def decide(text: str) -> dict[str, Decision]:
    """Every decision the message's own facts support (entry id -> Decision)."""
    out = oom(text)
    out.update(slurm(text))
    out.update(cpu_tensor(text))
    out.update(state_dict(text))
    out.update(loss_scale(text))
    return out
