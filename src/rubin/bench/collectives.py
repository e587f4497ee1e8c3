"""Collectives benchmark: all_reduce, all_gather, reduce_scatter, broadcast, all_to_all.

rubin starts the ranks itself: a torchrun subprocess with one rank per local GPU (NCCL), or
``ranks`` CPU processes over gloo. Each rank runs ``rubin.bench.collectives_worker``; rank 0
writes the raw trial times, and this module turns them into nccl-tests style rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from rubin.bench import busbw, stats
from rubin.errors import RubinError, bad_value

NAME = "collectives"


def defaults(quick: bool, ctx) -> dict:
    gpus = ctx.gpu_count
    if quick or gpus == 0:
        return {"ops": list(busbw.OPS), "sizes": [2**12, 2**16, 2**20, 2**22],  # 4 KiB .. 4 MiB
                "ranks": 2 if gpus == 0 else max(gpus, 1), "warmup": 5, "trials": 6, "iters": 4,
                "dtype": "float32", "timeout_s": 120}
    from rubin.platform import device as dev

    # 1 KiB .. 8 GiB as nccl-tests' usual sweep, capped at 1/8 of GPU memory (all_to_all holds 2 buffers).
    cap = (dev.total_memory_bytes(ctx.devices[0]) or 2**36) // 8
    return {"ops": list(busbw.OPS), "sizes": [2**k for k in range(10, 34, 2) if 2**k <= cap],
            "ranks": gpus, "warmup": 5, "trials": 10, "iters": 20, "dtype": "float32", "timeout_s": 1800}


def _check(params: dict) -> None:
    for op in params["ops"]:
        if op not in busbw.OPS:
            raise bad_value("collectives.ops", op, f"one of {', '.join(busbw.OPS)}")
    if int(params["ranks"]) < 2:
        raise bad_value("collectives.ranks", params["ranks"], "at least 2 ranks", "a collective needs peers")
    for key in ("warmup", "trials", "iters"):
        if int(params[key]) < (0 if key == "warmup" else 1):
            raise bad_value(f"collectives.{key}", params[key], "a positive count")


def launch(params: dict, *, device: str, workdir: Path) -> dict:
    """Run the worker on ``params['ranks']`` local ranks through torchrun; return rank 0's JSON."""
    pfile, ofile = workdir / "collectives-params.json", workdir / "collectives-raw.json"
    pfile.write_text(json.dumps({**params, "device": device}))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
           f"--nproc-per-node={int(params['ranks'])}", "-m", "rubin.bench.collectives_worker",
           str(pfile), str(ofile)]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # N ranks on the same cores: no thread oversubscription
    env.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=params.get("timeout_s", 600))
    except subprocess.TimeoutExpired as exc:
        raise RubinError(f"collectives: the {params['ranks']} ranks did not finish within {exc.timeout:.0f} s "
                         "(a hung collective); set NCCL_DEBUG=INFO and run `rubin doctor`") from None
    if proc.returncode != 0 or not ofile.exists():
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise RubinError(f"collectives: torchrun exited {proc.returncode}: {tail}")
    return json.loads(ofile.read_text())


def rows_from_raw(raw: dict) -> list[dict]:
    out = []
    for r in raw["rows"]:
        n, nbytes = r["ranks"], r["bytes"]
        t = stats.summarize(r["samples_s"])
        out.append({
            "op": r["op"], "bytes": nbytes, "ranks": n, "count": r["count"],
            "time_us": stats.transform(t, lambda s: s * 1e6),
            "algbw_gbps": stats.transform(t, lambda s: busbw.algbw_gbps(nbytes, s)),
            "busbw_gbps": stats.transform(t, lambda s: busbw.busbw_gbps(r["op"], nbytes, s, n)),
            "wrong": r["wrong"], "verified": r["wrong"] == 0,
        })
    return out


def summary(rows: list[dict]) -> dict:
    """Per op: the busbw at the largest size, and the nccl-tests "Avg bus bandwidth" (mean over sizes)."""
    result = {}
    for op in dict.fromkeys(r["op"] for r in rows):
        mine = [r for r in rows if r["op"] == op]
        big = max(mine, key=lambda r: r["bytes"])
        result[op] = {"busbw_gbps_at_max_bytes": big["busbw_gbps"]["median"], "max_bytes": big["bytes"],
                      "avg_busbw_gbps": sum(r["busbw_gbps"]["median"] for r in mine) / len(mine),
                      "peak_busbw_gbps": max(r["busbw_gbps"]["median"] for r in mine)}
    return result


def run(params: dict, ctx) -> dict:
    if ctx.gpu_count == 1 and int(params["ranks"]) <= 1:
        # NCCL refuses two ranks on one GPU, and gloo on the host would not measure the GPU.
        return {"status": "skipped", "rows": [], "notes": ["one GPU: collectives need at least 2 local GPUs"]}
    _check(params)
    device = "cuda" if ctx.gpu_count else "cpu"
    with tempfile.TemporaryDirectory(prefix="rubin-coll-") as tmp:
        raw = launch(params, device=device, workdir=Path(tmp))
    rows = rows_from_raw(raw)
    wrong = sum(r["wrong"] for r in rows)
    result = {
        "rows": rows,
        "summary": summary(rows),
        "method": {"backend": raw["meta"]["backend"], "ranks": raw["meta"]["world"],
                   "launcher": "torchrun --standalone", "timing": "host clock around iters calls, barrier before, "
                   "device sync after; time averaged across ranks", "verified": "every size, rank-dependent data",
                   "bytes": "nccl-tests size column", "busbw": "nccl-tests factors"},
    }
    if wrong:
        result["error"] = f"{wrong} wrong output elements: the collective produced incorrect results"
    return result
