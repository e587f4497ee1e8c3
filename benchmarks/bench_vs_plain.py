"""rubin's matmul, device-copy and host-to-device figures against plain loops written independently, side by side.

    python benchmarks/bench_vs_plain.py            # GPU: bf16 8192^3 matmul, 1 GiB device copy, 256 MiB pinned H2D
    python benchmarks/bench_vs_plain.py --small    # CPU-sized (fp32 256^3 in GFLOP/s, 4 MiB copies, host-to-host)

The plain side is what people run by hand: 3 warm-ups, then the mean of N back-to-back operations
timed with the host clock around one synchronize. The rubin side is ``rubin bench``'s own code
(``bench.matmul.measure_shape``, ``bench.memory.membw_run``, ``bench.memory.h2d_run``). Both are a
*burst* figure: on a GPU each round starts after a cool-down (power under a quarter of its limit), and
the two sides alternate for ``--rounds`` rounds so clock and thermal drift hit both. Printed: the median
of each side, the spread, and their ratio, as a text line and a JSON figure line (target: within 3%).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def sync(torch, device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def plain_mm_tflops(torch, n: int, dtype, device, iters: int) -> float:
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        torch.mm(a, b)
    sync(torch, device)
    t0 = time.perf_counter()
    for _ in range(iters):
        torch.mm(a, b)
    sync(torch, device)
    return 2 * n**3 * iters / (time.perf_counter() - t0) / 1e12


def plain_copy_gbps(torch, dst, src, device, iters: int, *, both_ways: bool) -> float:
    """GB/s of ``dst.copy_(src)``; a device copy counts read + written bytes (as STREAM and rubin do)."""
    for _ in range(3):
        dst.copy_(src, non_blocking=True)
    sync(torch, device)
    t0 = time.perf_counter()
    for _ in range(iters):
        dst.copy_(src, non_blocking=True)
    sync(torch, device)
    nbytes = src.numel() * src.element_size()
    return (2 if both_ways else 1) * nbytes * iters / (time.perf_counter() - t0) / 1e9


def report(name: str, unit: str, rubin: list[float], plain: list[float], *, text: bool = True) -> None:
    """The ratio of the medians so far, as a figure line (after every round: a later line supersedes it)."""
    med = statistics.median
    ratio = med(rubin) / med(plain)
    if text:
        print(f"{name:34s} rubin {med(rubin):10.1f}  plain {med(plain):10.1f} {unit:8s} ratio {ratio:.3f}  "
              f"(spread rubin {min(rubin):.1f}-{max(rubin):.1f}, plain {min(plain):.1f}-{max(plain):.1f})", flush=True)
    print(json.dumps({"figure": f"bench-vs-plain {name} rubin/plain", "value": round(ratio, 4), "unit": "x",
                      "target": "0.97-1.03", "kind": "gap", "ok": abs(ratio - 1) <= 0.03, "rubin": med(rubin),
                      "plain": med(plain), "rounds": len(rubin), "figure_unit": unit}), flush=True)


def main(argv=None) -> int:
    import torch

    from rubin.bench import matmul, memory
    from rubin.bench.suites import make_context
    from rubin.platform import device as dev
    from rubin.platform import nvml
    from rubin.platform.nvml_watch import wait_until_cool

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="CPU sizes")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    ctx = make_context("cpu" if args.small else "auto", quick=True, workdir=".")
    gpu = ctx.gpu_count > 0 and not args.small
    device = ctx.device
    ctx.devices = [device]
    n, dtype_name, dtype = (8192, "bf16", torch.bfloat16) if gpu else (256, "fp32", torch.float32)
    copy_bytes, h2d_bytes = (2**30, 256 * 2**20) if gpu else (4 * 2**20, 4 * 2**20)
    iters = 10 if gpu else 4
    flush = torch.empty(2 * (dev.l2_cache_bytes(device) or 16 * 2**20), dtype=torch.uint8, device=device)
    src = torch.ones(copy_bytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    host = dev.host_buffer(h2d_bytes, pinned=gpu).fill_(1)
    devbuf = torch.empty(h2d_bytes, dtype=torch.uint8, device=device)
    figs = {k: ([], []) for k in ("mm", "copy", "h2d")}
    for r in range(args.rounds):
        if gpu:
            wait_until_cool(nvml.index_of(device), max_s=2.0)
        first_rubin = r % 2 == 0  # alternate which side runs first in a round
        for side in ((0, 1) if first_rubin else (1, 0)):
            if side == 0:
                fig = matmul.measure_shape(torch, dtype_name, n, n, n, device, warmup=3, trials=iters, flush=flush)
                figs["mm"][0].append(fig["tflops"]["median"])
                out = memory.membw_run({"bytes": [copy_bytes], "warmup": 3, "trials": 5, "iters": iters}, ctx)
                figs["copy"][0].append(out["rows"][0]["gbps"]["median"])
                out = memory.h2d_run({"bytes": [h2d_bytes], "warmup": 3, "trials": 5, "iters": iters}, ctx)
                row = next(x for x in out["rows"] if x["op"] == "h2d" and x["memory"] == ("pinned" if gpu else "pageable"))
                figs["h2d"][0].append(row["gbps"]["median"])
            else:
                figs["mm"][1].append(plain_mm_tflops(torch, n, dtype, device, iters))
                figs["copy"][1].append(plain_copy_gbps(torch, dst, src, device, iters * 5, both_ways=True))
                figs["h2d"][1].append(plain_copy_gbps(torch, devbuf, host, device, iters * 5, both_ways=False))
        if r + 1 < args.rounds:  # the figures so far, at once; the last round's come with the text lines below
            for key, label, unit in _labels(gpu, dtype_name, n, copy_bytes, h2d_bytes):
                report(label, unit, *([x * (1.0 if gpu or key != "mm" else 1e3) for x in side] for side in figs[key]),
                       text=False)
    name = torch.cuda.get_device_name(device) if gpu else "cpu"
    print(f"device: {name}  rounds: {args.rounds}  (burst figures: each round after a cool-down)")
    for key, label, unit in _labels(gpu, dtype_name, n, copy_bytes, h2d_bytes):
        scale = 1.0 if gpu or key != "mm" else 1e3  # a CPU reads in GFLOP/s
        report(label, unit, *([x * scale for x in side] for side in figs[key]))
    return 0


def _labels(gpu: bool, dtype_name: str, n: int, copy_bytes: int, h2d_bytes: int) -> list[tuple[str, str, str]]:
    return [("mm", f"{dtype_name} matmul {n}^3", "TFLOP/s" if gpu else "GFLOP/s"),
            ("copy", f"device copy {copy_bytes >> 20} MiB", "GB/s"),
            ("h2d", f"{'h2d pinned' if gpu else 'host copy pageable'} {h2d_bytes >> 20} MiB", "GB/s")]


if __name__ == "__main__":
    raise SystemExit(main())
