"""What a checkpoint holds, and how the trainer writes and reads it.

Layout of one step folder (the commit protocol, manifest and retention live in
``rubin.train.checkpoint``; this module decides the contents):

```
step-00000100/
  model.pt, optim.pt      single / DDP: full state dicts (rank 0)
  dcp/                    FSDP: torch.distributed.checkpoint shards, one file per rank
  trainer.pt              scheduler, scaler, loop position, telemetry counters (rank 0)
  rng-rank-N.pt           RNG states of rank N: python, numpy, torch CPU, every CUDA device
  MANIFEST.json, COMMITTED
```

Everything is loaded with ``weights_only`` semantics, so RNG states are stored as plain
tensors and lists, never as pickled numpy objects.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from rubin.platform import device as dev
from rubin.train.checkpoint import load_file, save_file


@dataclass
class LoopState:
    step: int = 0  # optimizer steps done
    epoch: int = 0
    sample_in_epoch: int = 0  # global samples consumed in this epoch: the sampler position
    micro_step: int = 0  # always 0: checkpoints are taken at optimizer-step boundaries only
    samples_seen: int = 0
    tokens_seen: int = 0
    train_seconds: float = 0.0
    rollbacks: int = 0
    nan_skips: int = 0
    data_skips: list = field(default_factory=list)  # [epoch, first_sample, last_sample) windows skipped after a rollback


def capture_rng() -> dict:
    py = random.getstate()
    np_state = np.random.get_state()
    return {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state(),
        "cuda": dev.cuda_rng_states(),
    }


def restore_rng(state: dict) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state((n[0], n[1].numpy().astype(np.uint32), n[2], n[3], n[4]))
    torch.set_rng_state(state["torch"])
    dev.set_cuda_rng_states(state.get("cuda") or [])


def live_state(strategy, optimizer, scheduler, precision, loop: LoopState, rank: int) -> dict:
    """Everything single/DDP saves, as references to the live tensors.

    A synchronous save writes it as is; the async path first stages it into CPU buffers
    (``AsyncCheckpointer.save``), since the loop goes on mutating the live tensors.
    """
    out = {"rng": capture_rng()}
    if rank == 0:
        out["model"] = strategy.module.state_dict()
        out["optim"] = optimizer.state_dict()
        out["trainer"] = {"scheduler": scheduler.state_dict(), "precision": precision.state_dict(), "loop": asdict(loop)}
    return out


def write_snapshot(snap: dict, tmp: Path, rank: int) -> None:
    for name in ("model", "optim", "trainer"):
        if name in snap:
            save_file(snap[name], tmp / f"{name}.pt")
    save_file(snap["rng"], tmp / f"rng-rank-{rank}.pt")


def write_sharded(strategy, optimizer, scheduler, precision, loop: LoopState, tmp: Path, rank: int) -> None:
    """FSDP: every rank writes its own shards through DCP into the shared tmp folder."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    msd, osd = get_state_dict(strategy.module, optimizer)
    dcp.save({"model": msd, "optim": osd}, storage_writer=dcp.FileSystemWriter(str(tmp / "dcp"), sync_files=True))
    if rank == 0:
        save_file({"scheduler": scheduler.state_dict(), "precision": precision.state_dict(), "loop": asdict(loop)}, tmp / "trainer.pt")
    save_file(capture_rng(), tmp / f"rng-rank-{rank}.pt")


def load(path: Path, strategy, optimizer, scheduler, precision, rank: int, seed: int) -> LoopState:
    """Restore a checkpoint into live objects. Works across single/DDP/FSDP and world sizes."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    path = Path(path)
    if (path / "dcp").is_dir():
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        msd, osd = get_state_dict(strategy.module, optimizer)
        state = {"model": msd, "optim": osd}
        dcp.load(state, storage_reader=dcp.FileSystemReader(str(path / "dcp")))  # DCP reshards to this world size
        set_state_dict(strategy.module, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    elif strategy.name == "fsdp":  # a full checkpoint from single/DDP into sharded parameters
        set_state_dict(
            strategy.module,
            optimizer,
            model_state_dict=load_file(path / "model.pt"),
            optim_state_dict=load_file(path / "optim.pt"),
            options=StateDictOptions(full_state_dict=True),
        )
    else:
        strategy.module.load_state_dict(load_file(path / "model.pt"))
        optimizer.load_state_dict(load_file(path / "optim.pt"))
    trainer = load_file(path / "trainer.pt")
    scheduler.load_state_dict(trainer["scheduler"])
    precision.load_state_dict(trainer["precision"])
    loop = LoopState(**trainer["loop"])
    rng_file = path / f"rng-rank-{rank}.pt"
    if rng_file.exists():
        restore_rng(load_file(rng_file))
    else:  # a rank that did not exist when this was saved (world size grew): a fresh, reproducible stream
        reseed(seed, rank, loop.step)
    return loop


def reseed(seed: int, rank: int, step: int = 0) -> None:
    s = (seed * 7919 + rank * 104729 + step) % (2**31)
    random.seed(s)
    np.random.seed(s)
    dev.manual_seed_all(s)
