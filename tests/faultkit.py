"""The one fault-test harness: configs, commands, run-dir readers, damage helpers and the scenario table.

Used by the fault tests (``tests/train``) and by ``benchmarks/faults.py``, so each scenario is
defined once. Everything here is plain data or a small function; nothing asserts.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from rubin.runs import read_jsonl

# A small deterministic MLP: a step takes milliseconds, so faults are cheap to provoke.
MLP = [
    "run.epochs=null", "model.name=mlp", "model.args={hidden: 32, depth: 2}",
    "data.name=synthetic", "data.args={num_samples: 512, features: 16, num_classes: 4}",
    "data.batch_size=32", "telemetry.log_every_steps=1", "optim.warmup_steps=2", "run.deterministic=true",
]
# 40 steps (16 per epoch: two epoch boundaries), 4 accumulation micro-steps, dropout (RNG state matters).
RESUME_CFG = MLP + ["run.max_steps=40", "data.micro_batch_size=8", "checkpoint.every_steps=3",
                    "model.args={hidden: 32, depth: 2, dropout: 0.2}"]
# 12 steps, a checkpoint every 3, one DataLoader worker (it must survive the signals too).
FAULT_CFG = MLP + ["run.max_steps=12", "checkpoint.every_steps=3", "data.num_workers=1"]
ASYNC_CFG = FAULT_CFG + ["checkpoint.async=true"]
HANG_TIMEOUT_S = 5
GRACE_S = 25.0  # checkpoint.preemption_grace_s default


def sets(cfg: list[str]) -> list[str]:
    """``--set`` arguments for CFG."""
    return [a for item in cfg for a in ("--set", item)]


def train_args(run_dir, cfg: list[str], *extra: str) -> list[str]:
    """Arguments of ``rubin train`` (without the program) for CFG plus EXTRA items."""
    return ["train", "--quiet", "--set", f"run.dir={run_dir}", *sets([*cfg, *extra])]


def child_env(fault: str | None = None, **extra: str) -> dict:
    """The environment of a training process: no fault or restart count inherited, one thread per process."""
    env = dict(os.environ)
    env.pop("RUBIN_FAULT", None)
    env.pop("TORCHELASTIC_RESTART_COUNT", None)
    env.setdefault("OMP_NUM_THREADS", "1")  # the same for references and faults, and kind to shared cores
    if fault:
        env["RUBIN_FAULT"] = fault
    env.update(extra)
    return env


def train_cmd(run_dir, cfg: list[str], *extra: str, nproc: int = 0, max_restarts: int = 0) -> list[str]:
    """``python -m rubin train ...``, or under ``torchrun`` with NPROC ranks on this host."""
    args = train_args(run_dir, cfg, *extra)
    if not nproc:
        return [sys.executable, "-m", "rubin", *args]
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={nproc}",
            f"--max-restarts={max_restarts}", "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0",
            "-m", "rubin", *args]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- run-dir readers (tolerant: a SIGKILL may tear the last line) ----------------------------------
def events(run_dir, kind: str | None = None, since: float = 0.0) -> list[dict]:
    rows = read_jsonl(Path(run_dir) / "events.jsonl") if (Path(run_dir) / "events.jsonl").exists() else []
    return [e for e in rows if (kind is None or e.get("kind") == kind) and e.get("time", 0) >= since]


def summary(run_dir) -> dict | None:
    p = Path(run_dir) / "summary.json"
    return json.loads(p.read_text()) if p.exists() else None


def metric_steps(run_dir) -> list[int]:
    p = Path(run_dir) / "metrics.jsonl"
    return [int(r["step"]) for r in read_jsonl(p) if "step" in r] if p.exists() else []


def ckpt(run_dir, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step-{step:08d}"


# -- damage done to a committed checkpoint folder --------------------------------------------------
def truncate(d: Path) -> None:
    f = d / "model.pt"
    f.write_bytes(f.read_bytes()[:100])


def flip(d: Path) -> None:
    f = d / "optim.pt"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))


def drop(d: Path) -> None:
    (d / "rng-rank-0.pt").unlink()


def unmark(d: Path) -> None:
    (d / "COMMITTED").unlink()


DAMAGES = {"truncated": truncate, "flipped-byte": flip, "missing-file": drop, "missing-marker": unmark}


# -- the scenario table ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fault:
    """One fault scenario: what is injected, into which config, and what a correct run does."""

    name: str
    kind: str  # sigkill | sigterm | damage | diskfull | nan | elastic | stall | async-kill
    fault: str | None = None  # RUBIN_FAULT
    cfg: tuple = tuple(FAULT_CFG)
    nproc: int = 0
    quick: bool = True  # in ``benchmarks/faults.py --quick``
    arg: str | None = None  # the damage name, the nan policy, the async phase
    digest_by_design: bool = False  # the scenario changes training on purpose (a dropped update)


SCENARIOS = [
    Fault("SIGKILL step 5 (mid-epoch)", "sigkill", "crash@step=5", tuple(RESUME_CFG)),
    Fault("SIGKILL step 7 micro-2 (mid-accumulation)", "sigkill", "crash@step=7,phase=micro-2", tuple(RESUME_CFG)),
    Fault("SIGKILL step 17 (1st step of epoch 2)", "sigkill", "crash@step=17", tuple(RESUME_CFG), quick=False),
    Fault("SIGKILL step 23 backward", "sigkill", "crash@step=23,phase=backward", tuple(RESUME_CFG), quick=False),
    Fault("SIGKILL step 31 optimizer", "sigkill", "crash@step=31,phase=optimizer", tuple(RESUME_CFG), quick=False),
    Fault("SIGTERM external (send_signal)", "sigterm-external"),
    Fault("SIGTERM to torchrun, 2 ranks", "sigterm-external", nproc=2, quick=False),
    Fault("SIGTERM at step 5, rerun", "sigterm", "sigterm@step=5", quick=False),
    Fault("SIGTERM to rank 1 only, 2 ranks", "sigterm", "sigterm@step=5,rank=1", nproc=2, quick=False),
    # logs every 1000 steps: the stop is agreed at a timed flag check; the preempted event's reaction_s is the delay
    Fault("SIGTERM to rank 0 between log points, 2 ranks", "sigterm-latency", "sigterm@step=40,rank=0",
          tuple(MLP + ["run.max_steps=100000", "checkpoint.every_steps=100000", "telemetry.log_every_steps=1000"]), nproc=2),
    Fault("SIGTERM during checkpoint write", "sigterm-checkpoint", "sigterm@step=6,phase=checkpoint"),
    Fault("newest checkpoint truncated", "damage", "crash@step=8", arg="truncated"),
    Fault("newest checkpoint byte flipped", "damage", "crash@step=8", arg="flipped-byte", quick=False),
    Fault("newest checkpoint file missing", "damage", "crash@step=8", arg="missing-file", quick=False),
    Fault("newest checkpoint marker missing", "damage", "crash@step=8", arg="missing-marker", quick=False),
    Fault("disk full during save", "diskfull", "diskfull@save=2"),
    Fault("NaN at step 5, nan_policy=skip", "nan", "nan@step=5", arg="skip", quick=False, digest_by_design=True),
    Fault("NaN at step 5, nan_policy=rollback", "nan", "nan@step=5", arg="rollback", digest_by_design=True),
    Fault("rank 1 crash, torchrun --max-restarts 1", "elastic", "crash@step=7,rank=1", nproc=2),
    Fault(f"rank 1 stall, hang_timeout_s={HANG_TIMEOUT_S}", "stall", "stall@step=5,rank=1",
          tuple(FAULT_CFG + [f"faults.hang_timeout_s={HANG_TIMEOUT_S}"]), nproc=2),
    Fault("async save, SIGKILL at manifest", "async-kill", "crash@step=6,phase=manifest", tuple(ASYNC_CFG), arg="manifest"),
    Fault("async save, SIGKILL at commit", "async-kill", "crash@step=6,phase=commit", tuple(ASYNC_CFG), arg="commit", quick=False),
]


def scenario(name: str) -> Fault:
    return next(s for s in SCENARIOS if s.name == name)
