"""Matmul ceiling, in the style of stas00's mamf-finder: the Maximum Achievable Matmul FLOPS.

For each dtype and shape: warm-up, then ``trials`` timed single matmuls, each preceded by a
write to a buffer larger than the cache (an L2 flush), so no trial reuses cached operands.
FLOPs = 2mnk. Per dtype the summary gives the MAMF (the best per-shape median; a median rather
than one lucky sample, so it is reproducible), the best single sample, the median over shapes and
the % of the dense spec. fp8 uses ``torch._scaled_mm`` where the device supports it (CC >= 8.9).
Every local GPU is measured, so ``rubin compare`` can find a GPU below its peers.

A figure explains itself: on a GPU, NVML is sampled during each shape's trials (SM clock, power,
clock-event reasons, ``platform.nvml_watch``) and the row says whether the clock was capped. Each
shape starts after a cool-down (power back under a quarter of the limit, at most ``cooldown_s``),
and the headline shape gets two figures: ``burst`` (the trials right after a cool-down, what a short
plain loop measures) and ``sustained`` (back-to-back for ``sustained_s``, what a training run sees
once the power cap holds the clock down). On the recorded H200 these differ by about 13% at 8192^3.
"""

from __future__ import annotations

import time

from rubin.bench import stats
from rubin.errors import bad_value
from rubin.platform import device as dev
from rubin.platform import nvml, specs
from rubin.platform.nvml_watch import ClockWatch, wait_until_cool

NAME = "matmul"
DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


def defaults(quick: bool, ctx) -> dict:
    if ctx.gpu_count == 0:
        shapes = [[256, 256, 256], [512, 512, 512], [1024, 1024, 1024]] if quick else \
                 [[512, 512, 512], [1024, 1024, 1024], [2048, 2048, 2048]]
        return {"dtypes": ["fp32", "bf16"] if not quick else ["fp32"], "shapes": shapes,
                "warmup": 3, "trials": 10, "flush_bytes": 16 * 2**20, "cooldown_s": 0.0,
                "headline": {"dtype": "fp32", "shape": None, "sustained_s": 0.5}}  # None: the largest shape run
    headline = {"dtype": "bf16", "shape": [8192, 8192, 8192], "sustained_s": 5.0}
    if quick:
        return {"dtypes": ["bf16", "fp32"], "shapes": [[4096, 4096, 4096], [8192, 8192, 8192]],
                "warmup": 10, "trials": 20, "flush_bytes": None, "cooldown_s": 2.0, "headline": headline}
    # A mamf-finder style sweep around the sizes where Hopper/Blackwell reach their ceiling. bf16 first:
    # the headline dtype is measured before a long fp32 sweep has heated the GPU.
    sizes = [4096, 6144, 8192, 12288, 16384]
    return {"dtypes": ["bf16", "fp16", "fp8", "tf32", "fp32"],
            "shapes": [[s, s, s] for s in sizes] + [[8192, 8192, 2048], [16384, 4096, 16384]],
            "warmup": 20, "trials": 50, "flush_bytes": None, "cooldown_s": 3.0, "headline": headline}


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


def _watch(device, watch):
    """The NVML watch for this measurement: the one given (tests), else one on a CUDA device, else None."""
    if watch is not None or device.type != "cuda":
        return watch
    return ClockWatch(nvml.index_of(device))


def measure_shape(torch, dtype, m, n, k, device, *, warmup: int, trials: int, flush, watch=None) -> dict:
    """Median-of-trials figure for one shape; each trial is one matmul timed alone (CUDA events on a GPU)
    after an L2 flush. ``nvml`` holds what the clocks did during the trials (None without NVML)."""
    mm = _operands(torch, dtype, m, n, k, device)
    for _ in range(warmup):
        mm()
    dev.synchronize(device)
    seconds = []
    watch = _watch(device, watch)
    if watch is not None:
        watch.__enter__()
    try:
        for _ in range(trials):
            if flush is not None:
                flush.zero_()
            t = dev.timer(device)
            t.start()
            mm()
            t.stop()
            dev.synchronize(device)
            seconds.append(t.elapsed_s())
    finally:
        if watch is not None:
            watch.__exit__(None, None, None)
    flops = 2.0 * m * n * k
    fig_s = stats.summarize(seconds)
    return {"time_us": stats.transform(fig_s, lambda s: s * 1e6),
            "tflops": stats.transform(fig_s, lambda s: flops / s / 1e12),
            "nvml": watch.summary() if watch is not None else None}


def measure_sustained(torch, dtype, m, n, k, device, *, seconds: float, chunk: int = 10, watch=None) -> dict:
    """Back-to-back matmuls for ``seconds``, timed in chunks of ``chunk``; the figure is the median of the
    chunks in the second half, when the clocks have settled where the power and thermal limits hold them."""
    mm = _operands(torch, dtype, m, n, k, device)
    mm()
    dev.synchronize(device)
    rates = []
    watch = _watch(device, watch)
    flops = 2.0 * m * n * k * chunk
    end = time.perf_counter() + seconds
    if watch is not None:
        watch.__enter__()
    try:
        while time.perf_counter() < end or len(rates) < 4:
            t = dev.timer(device)
            t.start()
            for _ in range(chunk):
                mm()
            t.stop()
            dev.synchronize(device)
            rates.append(flops / t.elapsed_s() / 1e12)
    finally:
        if watch is not None:
            watch.__exit__(None, None, None)
    late = rates[len(rates) // 2:]
    return {"tflops": stats.summarize(late), "chunks": len(rates), "seconds": seconds,
            "nvml": watch.summary() if watch is not None else None}


def headline(torch, params: dict, device, flush, watch_factory=None) -> dict:
    """Burst (cool GPU, ``trials`` single matmuls) and sustained figures for the headline shape."""
    h = params["headline"]
    m, n, k = h.get("shape") or max(params["shapes"], key=lambda s: s[0] * s[1] * s[2])
    make = watch_factory or (lambda: None)
    cooled = wait_until_cool(nvml.index_of(device), max_s=params.get("cooldown_s", 0.0)) if device.type == "cuda" else 0.0
    burst = measure_shape(torch, h["dtype"], m, n, k, device, warmup=params["warmup"], trials=params["trials"],
                          flush=flush, watch=make())
    sustained = measure_sustained(torch, h["dtype"], m, n, k, device, seconds=h["sustained_s"], watch=make())
    return {"dtype": h["dtype"], "shape": [m, n, k], "cooldown_waited_s": round(cooled, 2),
            "burst": {"tflops": burst["tflops"]["median"], "spread": [burst["tflops"]["min"], burst["tflops"]["max"]],
                      "nvml": burst["nvml"]},
            "sustained": {"tflops": sustained["tflops"]["median"],
                          "spread": [sustained["tflops"]["min"], sustained["tflops"]["max"]],
                          "seconds": h["sustained_s"], "nvml": sustained["nvml"]},
            "sustained_over_burst": sustained["tflops"]["median"] / burst["tflops"]["median"]}


def run(params: dict, ctx, watch_factory=None) -> dict:
    """``watch_factory`` (tests) makes the NVML watch for each measurement; by default a CUDA device gets one."""
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
                    if device.type == "cuda":  # each shape starts from a cool GPU, as a short plain loop does
                        wait_until_cool(nvml.index_of(device), max_s=params.get("cooldown_s", 0.0))
                    fig = measure_shape(torch, dtype, m, n, k, device, warmup=params["warmup"],
                                        trials=params["trials"], flush=flush,
                                        watch=watch_factory() if watch_factory else None)
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
                "spec_tflops": peak, "pct_of_spec": best["pct_of_spec"],
                "capped_shapes": [[r["m"], r["n"], r["k"]] for r in mine if (r.get("nvml") or {}).get("capped")]}
            h = params.get("headline")
            if h and h["dtype"] == dtype:
                ctx.progress(f"matmul {dtype} headline shape: burst and sustained on {device}")
                previous = dev.set_tf32(dtype == "tf32")
                try:
                    summary[str(device)][dtype]["headline"] = headline(torch, params, device, flush, watch_factory)
                finally:
                    dev.set_tf32(previous)
        del flush
    return {"rows": rows, "skipped": skipped, "summary": summary,
            "method": {"flops": "2*m*n*k", "timing": "CUDA events per matmul" if ctx.gpu_count else "host clock per matmul",
                       "l2_flush": "a buffer of 2x L2 (64 MiB if unknown) zeroed before every timed matmul",
                       "mamf": "best per-shape median TFLOPS", "spec": "dense peak from the GPU catalog",
                       "clocks": "NVML sampled every 20 ms during each shape's trials; capped = a power/thermal/slowdown "
                                 "reason or a median SM clock under 95% of its maximum",
                       "cooldown": "before each shape, wait until power < 25% of its limit (at most cooldown_s)",
                       "headline": "burst = trials right after a cool-down; sustained = back-to-back for sustained_s, "
                                   "median of the second half's chunks"}}
