"""How long a checkpoint blocks the training loop: synchronous save vs async (snapshot + background write).

    python benchmarks/checkpoint_stall.py [--params-m 52] [--trials 3] [--dir DIR]
    python benchmarks/checkpoint_stall.py --fsdp [--nproc 2] [--trials 6]   # FSDP2 shards, DCP, under torchrun

A model of >= 50M parameters with Adam state (so ~3x the parameter bytes are saved) is saved
through rubin's CheckpointStore: sync = begin, write model.pt + optim.pt (fsync), commit
(manifest hashing, COMMITTED, rename); async stall = the time ``submit`` keeps the loop (copy
to CPU memory + begin), with the write and commit in the background. Prints median/min/max and
the ratio async stall / sync save (target <= 0.1). Measured, not asserted.

With ``--fsdp`` the script starts itself under torchrun (gloo on CPU, NCCL on GPUs): the model is
``fully_shard``-ed per layer, and each trial times, on every rank and reported as the slowest
rank, a synchronous save (begin, ``dcp.save`` of the shards, commit) against the loop's stall
for ``AsyncCheckpointer.save_sharded`` (begin, DCP staging to CPU, hand-off to DCP's thread).
The two kinds alternate within a trial. Trial 1 (gloo group and staging buffers created) is
reported apart and left out of the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from rubin.platform import process_group
from rubin.train.checkpoint import AsyncCheckpointer, CheckpointStore, save_file, snapshot_to_cpu


def build(params_m: float, with_optimizer: bool = True):
    width = 2560
    layers = max(1, round(params_m * 1e6 / (width * width + width)))
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    if not with_optimizer:
        return model
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


def fsdp_main(args) -> None:
    """One torchrun rank: FSDP2 shards, then alternating sync saves and async stalls."""
    from types import SimpleNamespace

    import torch.distributed as dist

    from rubin.train.strategy import Strategy

    cuda = torch.cuda.is_available()
    local = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = build(args.params_m, with_optimizer=False)
    info = SimpleNamespace(device=device, rank=rank, world_size=world)
    strategy = Strategy("fsdp", model, info, blocks=list(model), compile=False, act_ckpt=False)  # fully_shard per layer
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randn(2, 2560, device=device)).sum().backward()
    opt.step()  # materialise the Adam moments, as in a real checkpoint
    root = Path(args.dir)

    def barrier():
        dist.barrier()

    store = CheckpointStore(root / "sync", keep_last=1, rank=rank, world_size=world, barrier=barrier)
    astore = CheckpointStore(root / "async", keep_last=1, rank=rank, world_size=world, barrier=barrier)
    ac = AsyncCheckpointer(astore)
    sync_s, stall_s, bg_s = [], [], []

    def slowest(seconds: float) -> float:
        t = torch.tensor([seconds], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    for trial in range(args.trials):
        step = trial + 1
        barrier()
        t0 = time.perf_counter()
        store.save(step, lambda tmp: strategy.save_state(opt, tmp), {"strategy": "fsdp"})
        sync_s.append(slowest(time.perf_counter() - t0))
        barrier()
        t0 = time.perf_counter()
        ac.save_sharded(step, strategy.state_dicts(opt), {"rank": rank}, lambda snap, tmp: None, {"strategy": "fsdp"})
        stall_s.append(slowest(time.perf_counter() - t0))
        t0 = time.perf_counter()
        ac.wait()  # the next trial starts clean; this wait is not part of the stall
        bg_s.append(slowest(time.perf_counter() - t0))
    if rank == 0:
        n = sum(p.numel() for p in model.parameters())
        per_rank = sum(f.stat().st_size for f in (root / "sync" / f"step-{args.trials:08d}" / "dcp").iterdir()) / 2**20
        ratio = [a / s for a, s in zip(stall_s, sync_s)][1:]
        print(f"FSDP2 x{world} on {device.type}: {n / 1e6:.1f}M parameters + AdamW state, {per_rank:.0f} MiB per checkpoint "
              f"(all ranks), {args.trials} trials (trial 1 apart), slowest rank per trial, dir {root}")
        print(f"sync save (loop blocked)       {fmt(sync_s[1:])}   (trial 1: {sync_s[0]:.3f} s)")
        print(f"async stall (DCP staging)      {fmt(stall_s[1:])}   (trial 1: {stall_s[0]:.3f} s)")
        print(f"async rest of the save         {fmt(bg_s[1:])}   (waited for after the stall, off the loop)")
        print(f"ratio async stall / sync save  median {statistics.median(ratio):.3f}   min {min(ratio):.3f}   max {max(ratio):.3f}"
              f"   n={len(ratio)}   (target <= 0.1)")
    process_group.leave()


def launch_fsdp(args) -> None:
    """Start this script under torchrun with --nproc ranks."""
    root = args.dir or tempfile.mkdtemp(prefix="ckpt-stall-fsdp-")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={args.nproc}",
           "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0", __file__, "--fsdp", "--params-m", str(args.params_m),
           "--trials", str(args.trials), "--dir", root]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    raise SystemExit(subprocess.call(cmd, env=env))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params-m", type=float, default=52.0, help="model size in millions of parameters (>= 50 for the target)")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir on the default disk)")
    ap.add_argument("--fsdp", action="store_true", help="FSDP2 shards saved through DCP, sync vs async, under torchrun")
    ap.add_argument("--nproc", type=int, default=2, help="--fsdp: ranks to start")
    args = ap.parse_args()
    if args.fsdp:
        fsdp_main(args) if "LOCAL_RANK" in os.environ else launch_fsdp(args)
        return
    model, opt = build(args.params_m)
    n = sum(p.numel() for p in model.parameters())
    root = Path(args.dir or tempfile.mkdtemp(prefix="ckpt-stall-"))
    sync_s, stall_s, fresh_s, bg_s, nbytes = [], [], [], [], []
    store = CheckpointStore(root / "sync", keep_last=1,
                            on_event=lambda k, d: nbytes.append(d.get("bytes")) if k == "checkpoint_saved" else None)
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
