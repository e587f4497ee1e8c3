"""rubin's matmul and device-copy figures against plain loops written independently, side by side.

    python benchmarks/bench_vs_plain.py            # GPU: bf16 8192^3 matmul, 1 GiB copy
    python benchmarks/bench_vs_plain.py --small    # CPU-sized (fp32 1024^3, 64 MiB)

The two measurements alternate for ``--rounds`` rounds (so clock and thermal drift hit both), and
the script prints the median of each and their ratio. Targets on an H200: matmul >= 0.98x of the
plain torch.mm loop, copy >= 0.95x of the plain copy loop. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import time


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


def plain_copy_gbps(torch, nbytes: int, device, iters: int) -> float:
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    sync(torch, device)
    t0 = time.perf_counter()
    for _ in range(iters):
        dst.copy_(src)
    sync(torch, device)
    return 2 * nbytes * iters / (time.perf_counter() - t0) / 1e9


def sync(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    import torch

    from rubin.bench import matmul, memory
    from rubin.bench.suites import make_context

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="CPU sizes")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    ctx = make_context("auto", quick=True, workdir=".")
    gpu = ctx.gpu_count > 0 and not args.small
    device = ctx.device
    ctx.devices = [device]
    n, dtype_name = (8192, "bf16") if gpu else (1024, "fp32")
    dtype = torch.bfloat16 if gpu else torch.float32
    nbytes = 2**30 if gpu else 64 * 2**20
    mm_r, mm_p, cp_r, cp_p = [], [], [], []
    for _ in range(args.rounds):
        fig = matmul.measure_shape(torch, dtype_name, n, n, n, device, warmup=5, trials=20 if gpu else 6,
                                   flush=torch.empty(2 * (256 * 2**20 if gpu else 16 * 2**20), dtype=torch.uint8, device=device))
        mm_r.append(fig["tflops"]["median"])
        mm_p.append(plain_mm_tflops(torch, n, dtype, device, iters=20 if gpu else 6))
        out = memory.membw_run({"bytes": [nbytes], "warmup": 3, "trials": 10, "iters": 10 if gpu else 3}, ctx)
        cp_r.append(out["rows"][0]["gbps"]["median"])
        cp_p.append(plain_copy_gbps(torch, nbytes, device, iters=50 if gpu else 10))
    med = statistics.median
    print(f"device: {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}  rounds: {args.rounds}")
    print(f"{dtype_name} matmul {n}^3 TFLOPS   rubin {med(mm_r):10.3f}  plain torch.mm loop {med(mm_p):10.3f}  "
          f"ratio {med(mm_r) / med(mm_p):.3f}  (spread rubin {min(mm_r):.3f}-{max(mm_r):.3f}, plain {min(mm_p):.3f}-{max(mm_p):.3f})")
    print(f"device copy {nbytes >> 20} MiB GB/s rubin {med(cp_r):10.1f}  plain copy loop     {med(cp_p):10.1f}  "
          f"ratio {med(cp_r) / med(cp_p):.3f}  (spread rubin {min(cp_r):.1f}-{max(cp_r):.1f}, plain {min(cp_p):.1f}-{max(cp_p):.1f})")


if __name__ == "__main__":
    main()
