"""Projection of a measured throughput to a GPU that was not measured (GB300, Vera Rubin, ...).

Roofline reasoning: a compute-bound job scales with the dense peak for its dtype, a memory-bound
job with memory bandwidth; with an arithmetic intensity I (FLOP/byte) the attainable rate is
min(peak, I x bandwidth) on each GPU, which also catches a job that changes regime. Which applies
is decided from the measured MFU (or the intensity given). Only the bound part of a step is sure to speed
up: the low end holds the rest (data loading, communication, launches, host work) fixed, Amdahl
style; the high end lets the rest scale with the other resource.
A projection is labelled as such, with its assumptions, and always reported as a range.
"""

from __future__ import annotations

import math

from rubin.errors import UsageError, bad_value
from rubin.plan.throughput import Throughput

# Large-matmul ceilings reach about 80% of the dense peak (the MAMF table in stas00/ml-engineering:
# H100 80%, B200 78%, GB200 73%, A100 87%): an MFU of 0.8 means the step is all matmul.
ACHIEVABLE_FRACTION = 0.8
COMPUTE_BOUND_MFU = 0.25  # at or above this MFU, matmuls dominate the step


def _spec(name: str):
    from rubin.platform import specs

    return specs.get(name)


def _amdahl(ratio: float, fraction: float, rest_ratio: float = 1.0) -> float:
    """Speed-up when ``fraction`` of the step scales by ``ratio`` and the rest by ``rest_ratio``."""
    return 1.0 / (fraction / ratio + (1.0 - fraction) / rest_ratio)


def project(tp: Throughput, target: str, *, dtype: str = "bf16", mfu: float | None = None,
            intensity: float | None = None, bound_fraction: float | None = None) -> dict:
    if tp.gpu is None:
        raise UsageError("the measured GPU is unknown, so nothing can be projected: pass --measured-gpu "
                         "(e.g. --measured-gpu H100-SXM), or a bench file or run that records it")
    from rubin.platform import specs

    src, dst = _spec(tp.gpu), _spec(target)
    mfu = tp.mfu if mfu is None else mfu
    for name, v in (("mfu", mfu), ("bound-fraction", bound_fraction)):
        if v is not None and not 0 < v <= 1:
            raise bad_value(name, v, "a fraction in (0, 1]")
    if intensity is not None and not intensity > 0:
        raise bad_value("arithmetic-intensity", intensity, "a positive number of FLOPs per byte of memory traffic")
    pa, pb = specs.peak_tflops(src, dtype), specs.peak_tflops(dst, dtype)
    ba, bb = src.memory_bw_tbs, dst.memory_bw_tbs
    if None in (pa, pb, ba, bb):
        missing = src.key if (pa is None or ba is None) else dst.key
        raise UsageError(f"{missing} has no {dtype} peak or bandwidth in the spec catalog, so no projection; "
                         "pick another --dtype or measure it")
    rc, rb = pb / pa, bb / ba
    assumptions = [
        "same software stack and kernels on both GPUs (new platforms often start slower until libraries catch up)",
        "per-GPU rate; scaling to more GPUs is applied separately",
        f"dense {dtype} peaks {pa:g} -> {pb:g} TFLOPS, memory bandwidth {ba:g} -> {bb:g} TB/s (spec catalog)",
    ]
    if src.key == dst.key:
        regime, low, high = "same GPU", 1.0, 1.0
    elif intensity is not None:
        ridge = pa / ba  # FLOP per byte where the measured GPU turns compute-bound
        regime = "compute-bound" if intensity >= ridge else "memory-bound"
        roof = min(pb, intensity * bb) / min(pa, intensity * ba)
        f = bound_fraction if bound_fraction is not None else (min(1.0, mfu / ACHIEVABLE_FRACTION) if mfu else 0.5)
        other = rb if regime == "compute-bound" else rc
        low, high = _amdahl(roof, f), _amdahl(roof, f, other)
        assumptions.append(f"arithmetic intensity {intensity:g} FLOP/B vs the measured GPU's ridge point {ridge:.0f} FLOP/B")
        assumptions.append(f"{f:.0%} of the step time is bound by that resource, the rest does not speed up")
    elif mfu is not None and mfu >= COMPUTE_BOUND_MFU:
        regime = "compute-bound"
        f = bound_fraction if bound_fraction is not None else min(1.0, mfu / ACHIEVABLE_FRACTION)
        # the rest of the step (elementwise, norms: bandwidth-bound) is held fixed at the low end
        # and scaled with memory bandwidth at the high end
        low, high = _amdahl(rc, f), _amdahl(rc, f, rb)
        assumptions.append(f"measured MFU {mfu:.0%} >= {COMPUTE_BOUND_MFU:.0%}: matmuls dominate; "
                           f"{f:.0%} of the step (MFU / {ACHIEVABLE_FRACTION:.0%} achievable) scales with the peak")
    elif mfu is not None:
        regime = "memory-bound"
        f = bound_fraction if bound_fraction is not None else 0.5
        low, high = _amdahl(rb, f), _amdahl(rb, f, rc)
        assumptions.append(f"measured MFU {mfu:.0%} < {COMPUTE_BOUND_MFU:.0%}: taken as bandwidth- or overhead-bound; "
                           f"{f:.0%} of the step assumed to scale with memory bandwidth")
    else:
        regime = "unknown (no MFU or arithmetic intensity)"
        f = bound_fraction if bound_fraction is not None else 0.5
        low, high = _amdahl(min(rc, rb), f), max(rc, rb)
        assumptions.append("no MFU measured: the range spans the bandwidth and the peak ratios, "
                           f"with {f:.0%} of the step assumed to speed up at its low end")
    low, high = min(low, high), max(low, high)
    mid = math.sqrt(low * high)
    if dst.preliminary:
        assumptions.append(f"{dst.key} figures are preliminary (the vendor says so)")
    for spec in (src, dst):
        doubtful = [f for f in (dtype, "memory_bw_tbs") if f in spec.uncertain]
        if doubtful:
            assumptions.append(f"the spec catalog marks {spec.key} {', '.join(doubtful)} as unconfirmed (u)")
    per_gpu = tp.per_gpu
    return {
        "kind": "projection",
        "from_gpu": src.key,
        "to_gpu": dst.key,
        "dtype": dtype,
        "regime": regime,
        "mfu": mfu,
        "speedup": {"low": low, "mid": mid, "high": high},
        "per_gpu_throughput": {"low": per_gpu * low, "mid": per_gpu * mid, "high": per_gpu * high},
        "unit": tp.unit,
        "assumptions": assumptions,
    }


def projection_error(projected: dict, actual_per_gpu: float) -> dict:
    """How far a projection was from a measurement on the target GPU (both ends measured)."""
    if not actual_per_gpu > 0:
        raise bad_value("actual", actual_per_gpu, "a positive measured throughput per GPU")
    t = projected["per_gpu_throughput"]
    return {
        "actual_per_gpu": actual_per_gpu,
        "error_mid": (t["mid"] - actual_per_gpu) / actual_per_gpu,
        "within_range": t["low"] <= actual_per_gpu <= t["high"],
    }
