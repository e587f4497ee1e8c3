"""How long a checkpoint blocks the training loop: synchronous save vs async (snapshot + background write).

    python benchmarks/checkpoint_stall.py [--params-m 52] [--trials 3] [--dir DIR]

A model of >= 50M parameters with Adam state (so ~3x the parameter bytes are saved) is saved
through rubin's CheckpointStore: sync = begin, write model.pt + optim.pt (fsync), commit
(manifest hashing, COMMITTED, rename); async stall = the time ``submit`` keeps the loop (copy
to CPU memory + begin), with the write and commit in the background. Prints median/min/max and
the ratio async stall / sync save (target <= 0.1). Measured, not asserted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from rubin.train.checkpoint import AsyncCheckpointer, CheckpointStore, save_file, snapshot_to_cpu


def build(params_m: float):
    width = 2560
    layers = max(1, round(params_m * 1e6 / (width * width + width)))
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randn(2, width)).sum().backward()
    opt.step()  # materialise the Adam moments, as in a real checkpoint
    return model, opt


def write(snap):
    def fn(tmp: Path):
        save_file(snap["model"], tmp / "model.pt")
        save_file(snap["optim"], tmp / "optim.pt")

    return fn


def write_snap(snap, tmp: Path):
    write(snap)(tmp)


def fmt(xs):
    return f"median {statistics.median(xs):7.3f} s   min {min(xs):7.3f}   max {max(xs):7.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params-m", type=float, default=52.0, help="model size in millions of parameters (>= 50 for the target)")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir on the default disk)")
    args = ap.parse_args()
    model, opt = build(args.params_m)
    n = sum(p.numel() for p in model.parameters())
    root = Path(args.dir or tempfile.mkdtemp(prefix="ckpt-stall-"))
    sync_s, stall_s, fresh_s, bg_s, nbytes = [], [], [], [], []
    store = CheckpointStore(root / "sync", keep_last=1, on_event=lambda k, d: nbytes.append(d.get("bytes")) if k == "checkpoint_saved" else None)
    astore = CheckpointStore(root / "async", keep_last=1)
    ac = AsyncCheckpointer(astore)  # reused staging buffers (the default)
    ac_fresh = AsyncCheckpointer(CheckpointStore(root / "async-fresh", keep_last=1), reuse_buffers=False)
    for trial in range(args.trials):
        step = trial + 1
        t0 = time.perf_counter()
        store.save(step, write({"model": model.state_dict(), "optim": opt.state_dict()}), {"strategy": "single"})
        sync_s.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        snap = snapshot_to_cpu({"model": model.state_dict(), "optim": opt.state_dict()})
        ac_fresh.submit(step, write(snap), {"strategy": "single"})
        fresh_s.append(time.perf_counter() - t0)
        ac_fresh.wait()
        del snap

        t0 = time.perf_counter()
        ac.save(step, {"model": model.state_dict(), "optim": opt.state_dict()}, write_snap, {"strategy": "single"})
        stall_s.append(time.perf_counter() - t0)
        ac.wait()  # the next trial starts clean; this wait is not part of the stall
        bg_s.append(ac.last_write_s)
    ratio = [a / s for a, s in zip(stall_s, sync_s)]
    warm = ratio[1:] or ratio  # the first save allocates the staging buffers
    print(f"model: {n / 1e6:.1f}M parameters + AdamW state, {nbytes[-1] / 2**20:.0f} MiB per checkpoint, {args.trials} trials, dir {root}")
    print(f"sync save (loop blocked)       {fmt(sync_s)}")
    print(f"async stall, reused buffers    {fmt(stall_s)}   (trial 1 allocates them: {stall_s[0]:.3f} s)")
    print(f"async stall, fresh clone       {fmt(fresh_s)}")
    print(f"async background write+commit  {fmt(bg_s)}")
    print(f"ratio async stall / sync save  median {statistics.median(warm):.3f}   min {min(warm):.3f}   max {max(warm):.3f}"
          f"   (target <= 0.1; trials 2..N, reused buffers)")


if __name__ == "__main__":
    main()
