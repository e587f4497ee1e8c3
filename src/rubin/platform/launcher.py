"""Which launcher started this process, and this process's rank, local rank and world size.

Read from the environment only (no torch import), so ``rubin env`` can show it and the trainer can
join the right process group. The first source whose variables are present wins.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rubin.errors import UsageError

# (launcher, rank var, local-rank var, world-size var), in the order they are tried.
SOURCES = (
    ("torchrun", "RANK", "LOCAL_RANK", "WORLD_SIZE"),
    ("slurm", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
    ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
)


@dataclass(frozen=True)
class Launch:
    source: str = "single"
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1


def detect(env: dict | None = None) -> Launch:
    env = os.environ if env is None else env
    for source, r, lr, ws in SOURCES:
        if r in env and ws in env:
            try:
                return Launch(source, int(env[r]), int(env.get(lr, env[r])), int(env[ws]))
            except ValueError:
                raise UsageError(f"{r}={env[r]!r} / {ws}={env[ws]!r} are not integers; fix the launcher environment") from None
    return Launch()
