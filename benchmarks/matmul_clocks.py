"""Why does bf16 8192^3 read 672 TFLOP/s in a long sweep but 770+ in a short plain loop? Clocks, not method.

    python benchmarks/matmul_clocks.py              # GPU: bf16 8192^3, 8 s back-to-back
    python benchmarks/matmul_clocks.py --small      # CPU-sized (fp32 256^3, no NVML): a test of the script

The hypothesis from the recorded H200 sweep: the matmuls at 8192^3 and above draw the 700 W power limit
once the GPU has run for a while, so the SM clock falls under 1980 MHz and the figure with it. Four
phases, NVML sampled in each (SM clock, power, clock-event reasons):

1. burst: after a cool-down, 10 back-to-back matmuls after 3 warm-ups (the plain loop people quote);
2. sustained: back-to-back for --seconds (the median of the second half's chunks);
3. hot single: right after (2), rubin's per-matmul timing (L2 flush, one CUDA-event pair per matmul);
4. low-power data: sustained again with operands of small integers in [-2, 2] (fewer toggling bits,
   less power): if the power cap is the cause, this runs at a higher clock than (2).

Verdict "power cap" when (2) is capped by sw_power_cap and reads >= 5% under (1); "method" when (3)
reads >= 5% under (2) at the same clocks. Every figure is a JSON line; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import time


def emit(name: str, value, unit: str, target: str = "-", ok=None, **extra) -> None:
    value = float(f"{value:.4g}")
    print(json.dumps({"figure": name, "value": value, "unit": unit, "target": target, "ok": ok, **extra}), flush=True)


def clocks(nv: dict | None) -> dict:
    if not nv:
        return {"sm_clock_mhz": None, "power_w": None, "capped_by": None}
    return {"sm_clock_mhz": (nv.get("sm_clock_mhz") or {}).get("median"), "power_w": (nv.get("power_w") or {}).get("median"),
            "capped_by": nv.get("capped_by")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="CPU sizes")
    ap.add_argument("--seconds", type=float, default=8.0, help="length of each sustained phase")
    args = ap.parse_args(argv)
    import torch

    from rubin.bench import matmul
    from rubin.platform import device as dev
    from rubin.platform import nvml
    from rubin.platform.nvml_watch import ClockWatch, wait_until_cool

    gpu = dev.cuda_available() and not args.small
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    dtype_name, n = ("bf16", 8192) if gpu else ("fp32", 256)
    seconds = args.seconds if gpu else min(args.seconds, 0.5)
    tdtype = torch.bfloat16 if gpu else torch.float32
    index = nvml.index_of(device)  # NVML's number for this GPU (by UUID), not CUDA's
    flops = 2.0 * n**3

    def watch():
        return ClockWatch(index, interval_s=0.02) if gpu else None

    def burst() -> tuple[float, dict | None]:
        a = torch.randn(n, n, device=device, dtype=tdtype)
        b = torch.randn(n, n, device=device, dtype=tdtype)
        for _ in range(3):
            torch.mm(a, b)
        dev.synchronize(device)
        w = watch()
        if w:
            w.__enter__()
        t0 = time.perf_counter()
        for _ in range(10):
            torch.mm(a, b)
        dev.synchronize(device)
        s = time.perf_counter() - t0
        if w:
            w.__exit__(None, None, None)
        return 10 * flops / s / 1e12, w.summary() if w else None

    tag = f"{dtype_name} {n}^3"
    if gpu:
        wait_until_cool(index, max_s=5.0)
    b_tf, b_nv = burst()
    emit(f"matmul_clocks {tag} burst", b_tf, "TFLOP/s", **clocks(b_nv))
    sus = matmul.measure_sustained(torch, dtype_name, n, n, n, device, seconds=seconds, watch=watch())
    s_tf = sus["tflops"]["median"]
    emit(f"matmul_clocks {tag} sustained {seconds:g}s", s_tf, "TFLOP/s", **clocks(sus["nvml"]))
    flush = torch.empty(2 * (dev.l2_cache_bytes(device) or 64 * 2**20), dtype=torch.uint8, device=device)
    hot = matmul.measure_shape(torch, dtype_name, n, n, n, device, warmup=2, trials=20, flush=flush, watch=watch())
    h_tf = hot["tflops"]["median"]
    emit(f"matmul_clocks {tag} hot single (rubin's timing)", h_tf, "TFLOP/s", **clocks(hot["nvml"]))
    if gpu:
        wait_until_cool(index, max_s=5.0)
    a = torch.randint(-2, 3, (n, n), device=device).to(tdtype)
    b = torch.randint(-2, 3, (n, n), device=device).to(tdtype)
    w = watch()
    rates, end = [], time.perf_counter() + seconds
    if w:
        w.__enter__()
    while time.perf_counter() < end or len(rates) < 4:
        t = dev.timer(device)
        t.start()
        for _ in range(10):
            torch.mm(a, b)
        t.stop()
        dev.synchronize(device)
        rates.append(10 * flops / t.elapsed_s() / 1e12)
    if w:
        w.__exit__(None, None, None)
    late = sorted(rates[len(rates) // 2:])
    l_tf = late[len(late) // 2]
    emit(f"matmul_clocks {tag} sustained, small-integer data", l_tf, "TFLOP/s", **clocks(w.summary() if w else None))
    ratio = s_tf / b_tf
    power_capped = bool(sus["nvml"] and "sw_power_cap" in (sus["nvml"].get("capped_by") or []))
    if sus["nvml"] is None:
        verdict = "clocks unknown (no NVML)"
    else:
        verdict = "power cap" if power_capped and ratio <= 0.95 else "method" if h_tf / s_tf <= 0.95 else \
            "no drop" if ratio > 0.95 else "unexplained (no NVML reason)"
    emit(f"matmul_clocks {tag} sustained/burst", ratio, "x", "report both; compare burst with burst",
         verdict=verdict)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
