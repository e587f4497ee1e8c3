"""Which launcher started this process, and this process's rank, local rank and world size.

Read from the environment only (no torch import), so ``rubin env`` can show it and the trainer can
join the right process group. The first source whose variables are present wins; torchrun comes
first because it is the innermost launcher (torchrun inside Slurm, a PyTorchJob pod or a SkyPilot
node sets the ranks its workers use).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from rubin.errors import UsageError

# (launcher, rank var, local-rank var, world-size var), in the order they are tried.
SOURCES = (
    ("torchrun", "RANK", "LOCAL_RANK", "WORLD_SIZE"),
    ("slurm", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
    ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
)
# Node-level launchers that start one process per node when no torchrun sits in between:
# (launcher, node-rank var, node-count var, markers that must all be present).
NODE_SOURCES = (
    # The Kubeflow training operator's PyTorchJob sets PET_* (torchrun's own defaults) plus MASTER_ADDR/RANK/WORLD_SIZE.
    ("pytorchjob", "PET_NODE_RANK", "PET_NNODES", ("PET_NODE_RANK", "PET_NNODES")),
    ("skypilot", "SKYPILOT_NODE_RANK", "SKYPILOT_NUM_NODES", ("SKYPILOT_NODE_RANK", "SKYPILOT_NUM_NODES")),
)


@dataclass(frozen=True)
class Launch:
    source: str = "single"
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    master_addr: str | None = None  # the rendezvous host the launcher names, where it names one


def _int(env, name: str, *others: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        shown = " / ".join(f"{n}={env.get(n)!r}" for n in (name, *others))
        raise UsageError(f"{shown} are not integers; fix the launcher environment") from None


def detect(env: dict | None = None) -> Launch:
    env = os.environ if env is None else env
    under_torchrun = "TORCHELASTIC_RUN_ID" in env
    if not under_torchrun:
        for source, rank_var, count_var, markers in NODE_SOURCES:
            if all(m in env for m in markers):
                return _node_launch(env, source, rank_var, count_var)
    for source, r, lr, ws in SOURCES:
        if r in env and ws in env:
            return Launch(source, _int(env, r, ws), _int(env, lr if lr in env else r, ws), _int(env, ws, r),
                          env.get("MASTER_ADDR") or None)
    return Launch()


def _node_launch(env, source: str, rank_var: str, count_var: str) -> Launch:
    if ":" in env[count_var]:  # PET_NNODES="min:max": an elastic job, which only torchrun can run
        raise UsageError(f"{count_var}={env[count_var]!r} asks for an elastic node count, which needs torchrun: "
                         "start the job with torchrun (rubin launch k8s does)")
    if source == "skypilot":
        ips = env.get("SKYPILOT_NODE_IPS", "").split()
        master = ips[0] if ips else None
    else:
        master = env.get("PET_MASTER_ADDR") or env.get("MASTER_ADDR") or None
    return Launch(source, _int(env, rank_var, count_var), 0, _int(env, count_var, rank_var), master)


def describe(found: Launch) -> dict:
    """What ``rubin env`` shows: the launcher and this process's place in the job."""
    return {"launcher": found.source, "rank": found.rank, "local_rank": found.local_rank,
            "world_size": found.world_size, "master_addr": found.master_addr}


def tell_torchrun(line: str) -> bool:
    """Hand the error line a rank printed to torchrun, whose failure summary then shows it.

    torchrun names a worker's error file in ``TORCHELASTIC_ERROR_FILE`` and reads it when the worker
    exits non-zero: the "Root Cause" box of its summary says ``traceback : <the line>`` instead of a
    link to its docs. The format is the one torch's own ``@record`` writes, without the call stack
    (the box shows the stack instead of the message when one is there).
    """
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return False
    data = {"message": {"message": line, "extraInfo": {"timestamp": str(int(time.time()))}}}
    try:
        with open(path, "w") as fp:
            json.dump(data, fp)
    except OSError:  # the summary then keeps its link; the line is already on stderr
        return False
    return True
