"""Matmul ceiling, in the style of stas00's mamf-finder: the Maximum Achievable Matmul FLOPS.

For each dtype and shape: warm-up, then ``trials`` timed single matmuls, each preceded by a
write to a buffer larger than the cache (an L2 flush), so no trial reuses cached operands.
FLOPs = 2mnk. Per dtype the summary gives the MAMF (the best per-shape median; a median rather
than one lucky sample, so it is reproducible), the best single sample, the median over shapes and
the % of the dense spec. fp8 uses ``torch._scaled_mm`` where the device supports it (CC >= 8.9).
Every local GPU is measured, so ``rubin compare`` can find a GPU below its peers.
"""

from __future__ import annotations

from rubin.bench import stats
from rubin.errors import bad_value
from rubin.platform import device as dev
from rubin.platform import specs

NAME = "matmul"
DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


def defaults(quick: bool, ctx) -> dict:
    if ctx.gpu_count == 0:
        shapes = [[256, 256, 256], [512, 512, 512], [1024, 1024, 1024]] if quick else \
                 [[512, 512, 512], [1024, 1024, 1024], [2048, 2048, 2048]]
        return {"dtypes": ["fp32", "bf16"] if not quick else ["fp32"], "shapes": shapes,
                "warmup": 3, "trials": 10, "flush_bytes": 16 * 2**20}
    if quick:
        return {"dtypes": ["bf16", "fp32"], "shapes": [[4096, 4096, 4096], [8192, 8192, 8192]],
                "warmup": 10, "trials": 20, "flush_bytes": None}
    # A mamf-finder style sweep around the sizes where Hopper/Blackwell reach their ceiling.
    sizes = [4096, 6144, 8192, 12288, 16384]
    return {"dtypes": list(DTYPES), "shapes": [[s, s, s] for s in sizes] + [[8192, 8192, 2048], [16384, 4096, 16384]],
            "warmup": 20, "trials": 50, "flush_bytes": None}


def _operands(torch, dtype: str, m: int, n: int, k: int, device):
    if dtype == "fp8":
        a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()  # _scaled_mm wants column-major B
        one = torch.ones((), device=device)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    tdtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    a = torch.randn(m, k, device=device, dtype=tdtype)
    b = torch.randn(k, n, device=device, dtype=tdtype)
    c = torch.empty(m, n, device=device, dtype=tdtype)
    return lambda: torch.mm(a, b, out=c)


def _why_not(dtype: str, device) -> str | None:
    if dtype == "tf32" and device.type != "cuda":
        return "TF32 is a tensor-core mode of NVIDIA GPUs; on CPU it would be a second fp32 run"
    if dtype == "fp8" and not dev.fp8_matmul_supported(device):
        return "fp8 matmul (torch._scaled_mm) needs a CUDA GPU with compute capability 8.9 or newer"
    if dtype == "fp16" and device.type != "cuda":
        return "fp16 matmul on CPU is an emulation path, not a ceiling"
    return None


def measure_shape(torch, dtype, m, n, k, device, *, warmup: int, trials: int, flush) -> dict:
    mm = _operands(torch, dtype, m, n, k, device)
    for _ in range(warmup):
        mm()
    dev.synchronize(device)
    seconds = []
    for _ in range(trials):
        if flush is not None:
            flush.zero_()
        t = dev.timer(device)
        t.start()
        mm()
        t.stop()
        dev.synchronize(device)
        seconds.append(t.elapsed_s())
    flops = 2.0 * m * n * k
    fig_s = stats.summarize(seconds)
    return {"time_us": stats.transform(fig_s, lambda s: s * 1e6),
            "tflops": stats.transform(fig_s, lambda s: flops / s / 1e12)}


def run(params: dict, ctx) -> dict:
    import torch

    for d in params["dtypes"]:
        if d not in DTYPES:
            raise bad_value("matmul.dtypes", d, f"one of {', '.join(DTYPES)}")
    rows, skipped, summary = [], [], {}
    for device in ctx.devices:
        spec = ctx.spec_for(device)
        flush_bytes = params.get("flush_bytes") or 2 * (dev.l2_cache_bytes(device) or 64 * 2**20)
        flush = torch.empty(int(flush_bytes), dtype=torch.uint8, device=device)
        for dtype in params["dtypes"]:
            why = _why_not(dtype, device)
            if why:
                skipped.append({"device": str(device), "dtype": dtype, "reason": why})
                continue
            previous = dev.set_tf32(dtype == "tf32")
            try:
                peak = specs.peak_tflops(spec, dtype)
                for m, n, k in params["shapes"]:
                    ctx.progress(f"matmul {dtype} {m}x{n}x{k} on {device}")
                    fig = measure_shape(torch, dtype, m, n, k, device, warmup=params["warmup"],
                                        trials=params["trials"], flush=flush)
                    med = fig["tflops"]["median"]
                    rows.append({"device": str(device), "dtype": dtype, "m": m, "n": n, "k": k, **fig,
                                 "pct_of_spec": 100.0 * med / peak if peak else None})
            finally:
                dev.set_tf32(previous)
            mine = [r for r in rows if r["device"] == str(device) and r["dtype"] == dtype]
            best = max(mine, key=lambda r: r["tflops"]["median"])
            summary.setdefault(str(device), {})[dtype] = {
                "mamf_tflops": best["tflops"]["median"], "mamf_shape": [best["m"], best["n"], best["k"]],
                "max_sample_tflops": max(r["tflops"]["max"] for r in mine),
                "median_tflops": stats.summarize(r["tflops"]["median"] for r in mine)["median"],
                "spec_tflops": peak, "pct_of_spec": best["pct_of_spec"]}
        del flush
    return {"rows": rows, "skipped": skipped, "summary": summary,
            "method": {"flops": "2*m*n*k", "timing": "CUDA events per matmul" if ctx.gpu_count else "host clock per matmul",
                       "l2_flush": "a buffer of 2x L2 (64 MiB if unknown) zeroed before every timed matmul",
                       "mamf": "best per-shape median TFLOPS", "spec": "dense peak from the GPU catalog"}}
