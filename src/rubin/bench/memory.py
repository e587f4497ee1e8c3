"""Memory bandwidth (device copy) and host<->device transfer benchmarks.

membw: ``dst.copy_(src)`` on the device, counting bytes read plus bytes written (2 x size), as
STREAM "copy" does; the % of spec compares with the catalog's HBM bandwidth.
h2d: host-to-device and device-to-host copies from pinned (page-locked) and pageable host memory.
Without a GPU the same code copies host to host, so the path still runs (and says so).
"""

from __future__ import annotations

from rubin.bench import stats
from rubin.platform import device as dev

MEMBW = "membw"
H2D = "h2d"


def _time_copies(dst, src, device, *, warmup: int, trials: int, iters: int) -> dict:
    for _ in range(warmup):
        dst.copy_(src, non_blocking=True)
    dev.synchronize(device)
    seconds = []
    for _ in range(trials):
        t = dev.timer(device)
        t.start()
        for _ in range(iters):
            dst.copy_(src, non_blocking=True)
        t.stop()
        dev.synchronize(device)
        seconds.append(t.elapsed_s() / iters)
    return stats.summarize(seconds)


def membw_defaults(quick: bool, ctx) -> dict:
    if ctx.gpu_count == 0:
        return {"bytes": [8 * 2**20, 64 * 2**20] if quick else [64 * 2**20, 256 * 2**20], "warmup": 2, "trials": 8, "iters": 3}
    return {"bytes": [256 * 2**20, 2**30] if quick else [256 * 2**20, 2**30, 4 * 2**30], "warmup": 5, "trials": 20, "iters": 10}


def membw_run(params: dict, ctx) -> dict:
    import torch

    rows, summary = [], {}
    for device in ctx.devices:
        spec = ctx.spec_for(device)
        spec_gbs = spec.memory_bw_gbs if spec else None
        for nbytes in params["bytes"]:
            ctx.progress(f"membw {nbytes >> 20} MiB on {device}")
            src = torch.empty(int(nbytes), dtype=torch.uint8, device=device).fill_(1)
            dst = torch.empty_like(src)
            t = _time_copies(dst, src, device, warmup=params["warmup"], trials=params["trials"], iters=params["iters"])
            gbps = stats.transform(t, lambda s, b=nbytes: 2 * b / s / 1e9)
            rows.append({"device": str(device), "op": "d2d_copy", "bytes": int(nbytes), "time_us": stats.transform(t, lambda s: s * 1e6),
                         "gbps": gbps, "pct_of_spec": 100 * gbps["median"] / spec_gbs if spec_gbs else None})
            del src, dst
        # The largest buffer, not the fastest: a small one can sit in a cache and overstate memory.
        best = max((r for r in rows if r["device"] == str(device)), key=lambda r: r["bytes"])
        summary[str(device)] = {"gbps": best["gbps"]["median"], "bytes": best["bytes"], "spec_gbps": spec_gbs,
                                "pct_of_spec": best["pct_of_spec"]}
    return {"rows": rows, "summary": summary,
            "method": {"op": "dst.copy_(src) on one device", "bytes_counted": "read + written = 2 x size",
                       "timing": "CUDA events" if ctx.gpu_count else "host clock", "spec": "catalog memory_bw_tbs"}}


def h2d_defaults(quick: bool, ctx) -> dict:
    big = 64 * 2**20 if (quick or ctx.gpu_count == 0) else 1024 * 2**20
    return {"bytes": [big], "warmup": 2, "trials": 8 if quick else 20, "iters": 3 if quick else 10}


def h2d_run(params: dict, ctx) -> dict:
    import torch

    rows, summary, notes = [], {}, []
    for device in ctx.devices:
        on_gpu = device.type == "cuda"
        if not on_gpu:
            notes.append("no GPU: host-to-host copies (pageable only), so the code path runs; not a PCIe figure")
        for nbytes in params["bytes"]:
            for pinned in ((True, False) if on_gpu else (False,)):
                host = dev.host_buffer(nbytes, pinned=pinned).fill_(1)
                devbuf = torch.empty(int(nbytes), dtype=torch.uint8, device=device)
                for direction, dst, src in (("h2d", devbuf, host), ("d2h", host, devbuf)):
                    ctx.progress(f"{direction} {'pinned' if pinned else 'pageable'} {nbytes >> 20} MiB on {device}")
                    t = _time_copies(dst, src, device, warmup=params["warmup"], trials=params["trials"], iters=params["iters"])
                    gbps = stats.transform(t, lambda s, b=nbytes: b / s / 1e9)
                    rows.append({"device": str(device), "op": direction, "memory": "pinned" if pinned else "pageable",
                                 "bytes": int(nbytes), "time_us": stats.transform(t, lambda s: s * 1e6), "gbps": gbps})
                    summary.setdefault(str(device), {})[f"{direction}_{'pinned' if pinned else 'pageable'}_gbps"] = gbps["median"]
                del host, devbuf
    return {"rows": rows, "summary": summary, "notes": sorted(set(notes)),
            "method": {"op": "copy_ with non_blocking=True between a host buffer and the device", "bytes_counted": "size",
                       "host_memory": "pinned (page-locked) and pageable on GPU; pageable on CPU"}}
