"""How the model trains on this hardware: the parallel strategy, its precision, its optimizer.

- **Parallel** (``Strategy``): single, DDP and FSDP2 (``fully_shard`` per block, the ZeRO-3
  equivalent). The loop sees one handle, ``strategy.model``: the model to call, wrapped as the
  strategy needs (DDP, FSDP2 in place, ``torch.compile``). Everything else that depends on the
  strategy is a method here: ``no_sync(last)`` for accumulation, ``grad_norm_and_clip``, and the
  checkpoint contents ``save_state`` / ``load_state``. No other module branches on the strategy's name.
- **Precision** (``Precision``): fp32, bf16 autocast, and fp16 autocast with GradScaler.
- **Optimizer** (``build_optimizer``, ``build_scheduler``): AdamW or SGD, warmup then cosine or
  linear decay.

The three live together because they meet in every update (Lightning's ``Strategy`` holds its
precision plugin and its optimizers for the same reason): the fused optimizer kernel depends on the
device, the scaler wraps ``optimizer.step``, and FSDP2 shards what the optimizer holds.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from pathlib import Path

import torch
import torch.nn as nn

from rubin.errors import bad_value
from rubin.workloads.contract.blocks import apply_activation_checkpointing


def resolve(name: str, world_size: int, launcher: str = "single") -> str:
    """The strategy this launch runs: ``auto`` chosen from the world size, a wrong choice refused in one line.

    ddp and fsdp at world size 1 are allowed under a launcher (``torchrun --nproc-per-node=1``, a one-task
    Slurm step): the trainer then starts a 1-rank process group, so a one-GPU-per-node job runs the same
    code as its N-rank version. Without any launcher they are refused: a plain ``rubin train`` with
    strategy=ddp most likely forgot torchrun, and a 1-rank group there would need a port nobody arranged.
    """
    if name == "auto":
        return "single" if world_size == 1 else "ddp"
    if name == "single" and world_size > 1:
        raise bad_value("distributed.strategy", name, f"single runs one process, but world size is {world_size}",
                        "use ddp or fsdp")
    if name in ("ddp", "fsdp") and world_size == 1 and launcher == "single":
        raise bad_value("distributed.strategy", name,
                        f"{name} needs torchrun (or another launcher), and this process was started without one",
                        "launch with `torchrun --nproc-per-node=N -m rubin train ...` (N=1 runs it in one process), "
                        "or use strategy=auto or single")
    return name


def needs_group(name: str) -> bool:
    """Whether the resolved strategy runs collectives (DDP's all-reduce, FSDP's gathers), also on one rank."""
    return name in ("ddp", "fsdp")


class Strategy:
    def __init__(self, name: str, module: nn.Module, info, *, blocks: list[nn.Module], compile: bool, act_ckpt: bool):
        self.name = name
        self.info = info
        if act_ckpt:
            apply_activation_checkpointing(blocks)
        module.to(info.device)
        self._params = None  # grad_norm_and_clip's list, built once: walking the module tree every step costs host time
        self._module = module  # unwrapped (FSDP2 shards it in place): state dicts and digests come from here
        self._ddp = None
        if name == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [info.device.index] if info.device.type == "cuda" else None
            wrapped = self._ddp = DDP(module, device_ids=ids)
        elif name == "fsdp":
            from torch.distributed.fsdp import fully_shard

            for block in blocks:
                fully_shard(block)
            fully_shard(module)
            wrapped = module
        else:
            wrapped = module
        self.model = wrapped
        # Regional compile (one block compiled, reused by every layer): compile time stays near one block's.
        # In place, so state dict keys do not change; without blocks, the whole model in place.
        self.compiled = (blocks or [module]) if compile else []
        if compile:
            from rubin.train.speed.compile import compile_blocks

            compile_blocks(self.compiled)

    def no_sync(self, last_micro_step: bool):
        """Skip the gradient all-reduce on every micro-step but the last."""
        if last_micro_step or self.info.world_size == 1:
            return contextlib.nullcontext()
        if self._ddp is not None:
            return self._ddp.no_sync()
        if self.name == "fsdp":
            return _fsdp_no_sync(self._module)
        return contextlib.nullcontext()

    def grad_norm_and_clip(self, max_norm: float | None) -> torch.Tensor:
        """The global grad norm, as a device tensor (reading it is a host sync: the loop does so only at log points)."""
        if self._params is None:  # the optimizer holds these same tensors: restores copy into them, never replace them
            self._params = [p for p in self._module.parameters() if p.requires_grad]
        norm = torch.nn.utils.clip_grad_norm_(self._params, max_norm if max_norm else float("inf"))  # skips grad None
        if hasattr(norm, "full_tensor"):  # FSDP2: a DTensor norm over all shards
            norm = norm.full_tensor()
        return norm

    # -- checkpoint contents: model and optimizer (the Checkpointer writes the rest) ------
    @property
    def can_snapshot(self) -> bool:
        """Whether ``state_dicts`` are plain tensors that rubin's own snapshot can stage (``checkpoint.async``).

        FSDP's state is sharded DTensors that DCP writes collectively: its async save goes through
        DCP's own staging and writer thread instead (``AsyncCheckpointer.save_sharded``).
        """
        return self.name != "fsdp"

    def state_dicts(self, optimizer) -> dict:
        """Model and optimizer state as references to the live tensors.

        Single/DDP: full state dicts on rank 0, nothing on the others. FSDP: this rank's shards.
        """
        if self.name == "fsdp":
            from torch.distributed.checkpoint.state_dict import get_state_dict

            msd, osd = get_state_dict(self._module, optimizer)
            return {"model": msd, "optim": osd}
        if self.info.rank != 0:
            return {}
        return {"model": self._module.state_dict(), "optim": optimizer.state_dict()}

    def save_state(self, optimizer, folder: Path, state: dict | None = None) -> None:
        """Write model and optimizer into FOLDER: ``model.pt``/``optim.pt`` (rank 0), or FSDP's ``dcp/`` shards
        (every rank: a collective). STATE is a snapshot of ``state_dicts`` taken earlier (async saves)."""
        from rubin.train.checkpoint import save_file

        state = self.state_dicts(optimizer) if state is None else state
        if self.name == "fsdp":
            import torch.distributed.checkpoint as dcp

            dcp.save(state, storage_writer=dcp.FileSystemWriter(str(Path(folder) / "dcp"), sync_files=True))
            return
        for name in ("model", "optim"):
            if name in state:
                save_file(state[name], Path(folder) / f"{name}.pt")

    def load_state(self, optimizer, folder: Path) -> None:
        """Load model and optimizer from FOLDER, whichever strategy and world size wrote it."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

        from rubin.train.checkpoint import load_file

        folder = Path(folder)
        if (folder / "dcp").is_dir():
            from rubin.train.checkpoint import safe_load

            msd, osd = get_state_dict(self._module, optimizer)
            state = {"model": msd, "optim": osd}
            safe_load.load(state, folder / "dcp")  # restricted unpickling; DCP reshards to this world size
            set_state_dict(self._module, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        elif self.name == "fsdp":  # a full checkpoint from single/DDP into sharded parameters
            set_state_dict(
                self._module,
                optimizer,
                model_state_dict=load_file(folder / "model.pt"),
                optim_state_dict=load_file(folder / "optim.pt"),
                options=StateDictOptions(full_state_dict=True),
            )
        else:
            self._module.load_state_dict(load_file(folder / "model.pt"))
            optimizer.load_state_dict(load_file(folder / "optim.pt"))

    def full_state_dict(self) -> dict:
        """The full, unsharded model state (a collective under FSDP: call on every rank)."""
        if self.name == "fsdp":
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            return get_model_state_dict(self._module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return self._module.state_dict()

    def param_digest(self) -> str:
        """sha256 over every parameter (name, dtype, shape, bytes), full and unsharded, in state-dict order."""
        state = self.full_state_dict()
        names = {n for n, _ in self._module.named_parameters()}
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


# -- precision ------------------------------------------------------------------------------
# The order under fp16 is the one a widely read tutorial gets wrong: ``scaler.unscale_`` first,
# then clip the (now true-scale) gradients, then ``scaler.step``. Clipping scaled gradients
# clips by a norm thousands of times too large, which silently disables clipping.

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}  # fp8: bf16 around the float8 Linears


class Precision:
    def __init__(self, name: str, device, *, scaler_device: str | None = None, init_scale: float = 2.0**16):
        self.name = name
        self.device_type = device.type
        self.dtype = _DTYPES.get(name)
        # fp16 always gets a scaler; scaler_device lets the tests run the fp16 step order on CPU.
        fp16 = name == "fp16"
        self.scaler = torch.amp.GradScaler(scaler_device or device.type, init_scale=init_scale) if fp16 else None
        self.skipped_steps = 0

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def unscale(self, optimizer) -> None:
        if self.scaler:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer) -> bool:
        """Apply the update; False when the fp16 scaler skipped it (overflow), which is not a NaN."""
        if not self.scaler:
            optimizer.step()
            return True
        before = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        stepped = self.scaler.get_scale() >= before
        if not stepped:
            self.skipped_steps += 1
        return stepped

    def state_dict(self) -> dict:
        return {"scaler": self.scaler.state_dict() if self.scaler else None, "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state: dict) -> None:
        if self.scaler and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.skipped_steps = int(state.get("skipped_steps", 0))


# -- optimizer and learning-rate schedule ---------------------------------------------------
def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """No weight decay on norms, biases and other 1-D parameters (gains, embeddings' scales)."""
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.ndim >= 2 else no_decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def impl_flags(impl: str, device) -> dict:
    """torch.optim's implementation switches for ``optim.impl``.

    ``auto``: fused on CUDA (one kernel for all parameters: nanoGPT's choice, 91 vs 104 ms a step on
    GPT-124M on an H200), foreach elsewhere (fused CPU kernels exist but are slower than foreach there).
    """
    on_cuda = getattr(device, "type", str(device)) == "cuda"
    if impl == "auto":
        impl = "fused" if on_cuda else "foreach"
    if impl == "fused":
        return {"fused": True}
    if impl == "foreach":
        return {"foreach": True}
    return {"foreach": False}  # for-loop: one parameter at a time, the reference implementation


def build_optimizer(model: nn.Module, cfg, device="cpu") -> torch.optim.Optimizer:
    groups = param_groups(model, cfg.weight_decay)
    flags = impl_flags(getattr(cfg, "impl", "auto"), device)
    if cfg.name == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, **flags)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), **flags)


def lr_factor(step: int, *, warmup: int, total: int, schedule: str, min_ratio: float) -> float:
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant" or total <= warmup:
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    if schedule == "linear":
        shape = 1.0 - progress
    else:
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    return min_ratio + (1.0 - min_ratio) * shape


def build_scheduler(optimizer, cfg, total_steps: int):
    fn = lambda step: lr_factor(  # noqa: E731
        step, warmup=cfg.warmup_steps, total=total_steps, schedule=cfg.schedule, min_ratio=cfg.min_lr_ratio
    )
    return torch.optim.lr_scheduler.LambdaLR(optimizer, fn)
