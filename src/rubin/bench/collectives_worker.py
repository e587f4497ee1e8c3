"""One rank of the collectives sweep. Started by ``rubin.bench.collectives`` through torchrun.

Every (op, size) is timed as warm-up, then ``trials`` trials of ``iters`` back-to-back calls,
each trial between a barrier and a device sync. The time per call is averaged across ranks (as
nccl-tests ``-a 1``). After timing, the op runs once more on rank-dependent data and every rank
checks its output against the value the op must produce (nccl-tests ``-c 1``).

Usage: python -m torch.distributed.run ... -m rubin.bench.collectives_worker PARAMS.json OUT.json
"""

from __future__ import annotations

import json
import os
import sys
import time


def _ops(dist):
    ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return ag, rs


def _buffers(torch, op, count, world, dtype, device):
    """(input, output) of one op: output is None for the in-place ops."""
    if op in ("all_reduce", "broadcast"):
        return torch.zeros(count, dtype=dtype, device=device), None
    if op == "all_gather":
        return torch.zeros(count // world, dtype=dtype, device=device), torch.empty(count, dtype=dtype, device=device)
    if op == "reduce_scatter":
        return torch.zeros(count, dtype=dtype, device=device), torch.empty(count // world, dtype=dtype, device=device)
    return torch.zeros(count, dtype=dtype, device=device), torch.empty(count, dtype=dtype, device=device)


def _call(dist, op, inp, out):
    ag, rs = _ops(dist)
    if op == "all_reduce":
        dist.all_reduce(inp)
    elif op == "broadcast":
        dist.broadcast(inp, src=0)
    elif op == "all_gather":
        ag(out, inp)
    elif op == "reduce_scatter":
        rs(out, inp)
    else:
        dist.all_to_all_single(out, inp)


def _verify(torch, dist, op, inp, out, rank, world) -> int:
    """Run ``op`` once on rank-dependent data; return how many output elements are wrong."""
    count = inp.numel()
    if op in ("all_reduce", "broadcast"):
        inp.fill_(rank + 1)
        _call(dist, op, inp, out)
        expect = torch.full_like(inp, world * (world + 1) / 2 if op == "all_reduce" else 1)
        got = inp
    elif op == "all_gather":
        inp.fill_(rank + 1)
        _call(dist, op, inp, out)
        expect = torch.arange(1, world + 1, dtype=out.dtype, device=out.device).repeat_interleave(count)
        got = out
    elif op == "reduce_scatter":
        # chunk j of rank r holds r + j: rank r's output is sum over ranks of (q + r).
        chunk = count // world
        inp.copy_((torch.arange(world, device=inp.device).repeat_interleave(chunk) + rank).to(inp.dtype))
        _call(dist, op, inp, out)
        expect = torch.full_like(out, world * (world - 1) / 2 + world * rank)
        got = out
    else:
        # rank r sends r*world + j to rank j: rank r receives q*world + r from each rank q.
        chunk = count // world
        inp.copy_((torch.arange(world, device=inp.device).repeat_interleave(chunk) + rank * world).to(inp.dtype))
        _call(dist, op, inp, out)
        expect = (torch.arange(world, device=out.device) * world + rank).repeat_interleave(chunk).to(out.dtype)
        got = out
    return int((got != expect).sum().item())


def main(argv: list[str]) -> int:
    import torch
    import torch.distributed as dist

    from rubin.bench.busbw import element_count
    from rubin.platform import device as dev
    from rubin.platform import process_group

    params = json.loads(open(argv[0]).read())
    out_path = argv[1]
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = dev.pick_device(local_rank, params.get("device", "auto"))
    backend = dev.default_backend(device)
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = getattr(torch, params.get("dtype", "float32"))
    itemsize = torch.empty((), dtype=dtype).element_size()
    rows, finished = [], False
    try:
        for op in params["ops"]:
            for nbytes in params["sizes"]:
                count = element_count(op, nbytes, world, itemsize)
                inp, out = _buffers(torch, op, count, world, dtype, device)
                for _ in range(params["warmup"]):
                    _call(dist, op, inp, out)
                dev.synchronize(device)
                samples = []
                for _ in range(params["trials"]):
                    dist.barrier()
                    t0 = time.perf_counter()
                    for _ in range(params["iters"]):
                        _call(dist, op, inp, out)
                    dev.synchronize(device)
                    samples.append((time.perf_counter() - t0) / params["iters"])
                times = torch.tensor(samples, dtype=torch.float64, device=device)
                dist.all_reduce(times)
                times /= world
                wrong = torch.tensor([_verify(torch, dist, op, inp, out, rank, world)], device=device)
                dist.all_reduce(wrong)
                rows.append({"op": op, "bytes": count * itemsize, "count": count, "ranks": world,
                             "samples_s": times.cpu().tolist(), "wrong": int(wrong.item())})
                del inp, out
        finished = True
    finally:
        if rank == 0:
            meta = {"backend": backend, "world": world, "device": str(device),
                    "device_name": dev.device_name(device), "torch": torch.__version__}
            tmp = out_path + ".tmp"
            with open(tmp, "w") as f:
                json.dump({"meta": meta, "rows": rows}, f)
            os.replace(tmp, out_path)
        process_group.leave(barrier=finished)  # after an error peers may never reach a barrier
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
