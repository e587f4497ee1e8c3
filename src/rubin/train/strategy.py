"""Parallel strategies: single, DDP and FSDP2 (``fully_shard`` per block, the ZeRO-3 equivalent).

The loop only sees ``Strategy``: ``forward_model`` to call, ``no_sync(last)`` for accumulation,
``clip`` and the state-dict helpers. It never branches on the strategy itself.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib

import torch
import torch.nn as nn

from rubin.errors import bad_value


def resolve(name: str, world_size: int) -> str:
    if name == "auto":
        return "single" if world_size == 1 else "ddp"
    if name == "single" and world_size > 1:
        raise bad_value("distributed.strategy", name, f"single runs one process, but world size is {world_size}", "use ddp or fsdp")
    return name


def apply_activation_checkpointing(blocks: list[nn.Module]) -> None:
    """Recompute each block in backward. Patches ``forward`` on the instance, so state-dict keys do not change."""
    from torch.utils.checkpoint import checkpoint

    for block in blocks:
        block.forward = functools.partial(checkpoint, block.forward, use_reentrant=False)


class Strategy:
    def __init__(self, name: str, module: nn.Module, info, *, blocks: list[nn.Module], compile: bool, act_ckpt: bool):
        self.name = name
        self.info = info
        if act_ckpt:
            apply_activation_checkpointing(blocks)
        module.to(info.device)
        self.module = module  # the unwrapped model: state dicts and digests come from here
        if name == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [info.device.index] if info.device.type == "cuda" else None
            wrapped = DDP(module, device_ids=ids)
        elif name == "fsdp":
            from torch.distributed.fsdp import fully_shard

            for block in blocks:
                fully_shard(block)
            fully_shard(module)
            wrapped = module
        else:
            wrapped = module
        self.wrapped = wrapped
        self.forward_model = torch.compile(wrapped) if compile else wrapped

    def no_sync(self, last_micro_step: bool):
        """Skip the gradient all-reduce on every micro-step but the last."""
        if last_micro_step or self.info.world_size == 1:
            return contextlib.nullcontext()
        if self.name == "ddp":
            return self.wrapped.no_sync()
        if self.name == "fsdp":
            return _fsdp_no_sync(self.wrapped)
        return contextlib.nullcontext()

    def parameters(self):
        return self.module.parameters()

    def grad_norm_and_clip(self, max_norm: float | None) -> torch.Tensor:
        params = [p for p in self.module.parameters() if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm else float("inf"))
        if hasattr(norm, "full_tensor"):  # FSDP2: a DTensor norm over all shards
            norm = norm.full_tensor()
        return norm

    # -- state -------------------------------------------------------------------
    def full_state_dict(self) -> dict:
        """The full, unsharded model state (a collective under FSDP: call on every rank)."""
        if self.name == "fsdp":
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            return get_model_state_dict(self.module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return self.module.state_dict()

    def param_digest(self) -> str:
        """sha256 over every parameter (name, dtype, shape, bytes), full and unsharded, in state-dict order."""
        state = self.full_state_dict()
        names = {n for n, _ in self.module.named_parameters()}
        h = hashlib.sha256()
        for key, t in state.items():
            if key not in names:
                continue
            t = t.detach().cpu().contiguous()
            h.update(f"{key}|{t.dtype}|{tuple(t.shape)}|".encode())
            h.update(t.view(-1).view(torch.uint8).numpy().tobytes())
        return h.hexdigest()


@contextlib.contextmanager
def _fsdp_no_sync(module):
    module.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        module.set_requires_gradient_sync(True)
