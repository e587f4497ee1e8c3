"""Rank detection, process-group setup and teardown, and the few collectives the loop needs.

Rank and world size come from ``rubin.platform.launcher`` (torchrun, Slurm, OpenMPI / Azure ML, ...).
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, field

from rubin.errors import bad_value
from rubin.platform import device as dev
from rubin.platform import launcher, process_group
from rubin.train.hosts import Hosts, check_clocks, exchange, socket_interfaces


@dataclass
class DistInfo:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    source: str = "single"
    device: object = None
    backend: str | None = None
    initialized: bool = False
    determinism: dict | None = None  # what run.deterministic pinned (env.json records it)
    hosts: Hosts | None = None  # which rank runs on which host (set once the group forms)
    notes: list[str] = field(default_factory=list)  # what setup chose for the user, to show as warnings

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def detect(env: dict | None = None) -> DistInfo:
    found = launcher.detect(env)
    return DistInfo(found.rank, found.local_rank, found.world_size, found.source)


def setup(cfg, info: DistInfo, *, group: bool) -> DistInfo:
    """Pick INFO's device, check precision against it, and join the process group when world > 1 or when
    GROUP says the strategy runs collectives (ddp/fsdp at world size 1 under a launcher: a 1-rank group).

    The strategy is resolved by the caller (the trainer), before this runs: a strategy the launch cannot
    run is refused before any device or group is touched.
    """
    import torch
    import torch.distributed as dist

    info.device = dev.pick_device(info.local_rank, cfg.run.device)
    backend = cfg.distributed.backend
    if backend == "auto":
        backend = dev.default_backend(info.device)
    if backend == "nccl" and info.device.type != "cuda":
        raise bad_value("distributed.backend", "nccl", "nccl needs CUDA devices; this rank trains on cpu", "use backend=auto or gloo")
    info.backend = backend
    check_precision(cfg.precision, info.device)
    if info.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = cfg.run.allow_tf32
        torch.backends.cudnn.allow_tf32 = cfg.run.allow_tf32
    if (info.world_size > 1 or group) and not dist.is_initialized():
        if "MASTER_ADDR" not in os.environ:
            os.environ.setdefault("MASTER_ADDR", os.environ.get("SLURM_LAUNCH_NODE_IPADDR", "127.0.0.1"))
            os.environ.setdefault("MASTER_PORT", "29500")
        info.notes += socket_interfaces(backend)
        timeout = datetime.timedelta(seconds=cfg.distributed.timeout_s)
        dist.init_process_group(
            backend,
            store=_elastic_store(info, timeout),
            rank=info.rank,
            world_size=info.world_size,
            timeout=timeout,
            device_id=info.device if info.device.type == "cuda" else None,
        )
        info.initialized = True
    if info.initialized and info.world_size > 1:
        info.hosts = exchange(info.world_size)
        info.notes += check_clocks(info.hosts)
    return info


def _elastic_store(info: DistInfo, timeout):
    """Under torchrun with its agent's shared store, a store whose keys are private to this restart attempt;
    None elsewhere (env://).

    By default torchrun keeps its agent's TCPStore across elastic restarts, and the process group's keys
    (each rank's gloo/NCCL address) have the same names in every attempt. A re-formed group could then
    read a dead rank's address from the failed attempt: 'Connection refused', or a hang in init. A prefix
    per attempt keeps the attempts apart. That only holds while every agent restarts together (one host):
    a replacement node's agent counts its attempts from 0. So ``rubin launch`` turns the shared store off
    (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``, which a replacement needs anyway, see docs/faults.md): each
    rendezvous round then gets a new store on a new port, with no keys from an earlier attempt.
    """
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or "MASTER_ADDR" not in os.environ:
        return None
    import torch.distributed as dist

    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), info.world_size,
                          is_master=False, timeout=timeout)
    return dist.PrefixStore(f"rubin/attempt-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)


def check_precision(precision: str, device) -> None:
    if precision == "fp16" and device.type != "cuda":
        raise bad_value("precision", "fp16", "fp16 needs a CUDA GPU (GradScaler); on cpu use fp32 or bf16", "set --set precision=bf16")
    if precision == "fp8":
        from rubin.train.speed.fp8 import refuse_unless_supported

        refuse_unless_supported(device)
    if precision == "bf16" and not dev.supports_bf16(device):
        raise bad_value("precision", "bf16", f"{dev.device_name(device)} has no bf16 support", "use fp16 or fp32")


def teardown(info: DistInfo) -> None:
    """Barrier, let gloo's workers finish, then destroy (``platform.process_group.leave``: without the
    barrier gloo ranks abort at exit while peers still talk, without the wait now and then after it)."""
    if info.initialized:
        process_group.leave()
        info.initialized = False


def abort(info: DistInfo) -> None:
    """Leave the group without a barrier: after an error, peers may never reach one."""
    if info.initialized:
        process_group.leave(barrier=False)
        info.initialized = False


def barrier(info: DistInfo) -> None:
    import torch.distributed as dist

    if info.world_size > 1 and dist.is_initialized():
        dist.barrier()


def broadcast_object(info: DistInfo, obj):
    if info.world_size == 1:
        return obj
    import torch.distributed as dist

    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]
