"""Helpers for the profile tests: synthetic traces, and real ones recorded by 2 gloo ranks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

WORKER = Path(__file__).with_name("profworker.py")


def record(out: Path, mode: str, *, run_id: str = "test-run", timeout: float = 180) -> Path:
    """Run profworker.py on 2 gloo ranks (torchrun, own session, killed whole on a timeout); OUT is the run dir."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2", "--rdzv-backend=c10d",
           "--rdzv-endpoint=localhost:0", str(WORKER), str(out), mode]
    env = dict(os.environ, OMP_NUM_THREADS="1", PROF_RUN_ID=run_id)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    return out


def x(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def write_rank(run: Path, rank: int, events: list[dict], *, run_id: str = "synthetic", world: int = 2, host: str | None = None):
    d = run / "profile"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"rank-{rank}.trace.json").write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    (d / f"rank-{rank}.meta.json").write_text(json.dumps({"run_id": run_id, "rank": rank, "world_size": world,
                                                          "host": host or f"node{rank}", "steps": [3, 5]}))


def gpu_steps(n: int = 3, step_us: float = 10_000, kernels=(), comm=(), host=(), data=()) -> list[dict]:
    """N GPU steps of STEP_US each. KERNELS, COMM, HOST, DATA: (offset, dur, name) inside each step."""
    ev = []
    for i in range(n):
        t0 = i * step_us
        ev.append(x(f"ProfilerStep#{i + 3}", t0, step_us, cat="user_annotation"))
        ev += [x(name, t0 + off, dur, cat="kernel", tid=7) for off, dur, name in kernels]
        ev += [x(name, t0 + off, dur, cat="kernel", tid=8) for off, dur, name in comm]
        ev += [x(name, t0 + off, dur) for off, dur, name in host]
        ev += [x("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", t0 + off, dur, cat="user_annotation")
               for off, dur, _ in data]
    return ev
