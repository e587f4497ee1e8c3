"""Projection to an unmeasured GPU: regime from MFU / intensity, always a range."""

import pytest

from rubin.errors import UsageError
from rubin.plan.projection import project, projection_error
from rubin.plan.throughput import by_hand
from rubin.platform import specs


def _ratio(a, b, field):
    return getattr(specs.get(b), field) / getattr(specs.get(a), field)


def test_same_gpu_projects_to_itself():
    p = project(by_hand(100, "samples", 1, "H100-SXM"), "H100-SXM", mfu=0.4)
    assert p["speedup"] == {"low": 1.0, "mid": 1.0, "high": 1.0}


def test_compute_bound_range_is_between_amdahl_and_the_roofline():
    peak = _ratio("H100-SXM", "GB300", "bf16")
    bw = _ratio("H100-SXM", "GB300", "memory_bw_tbs")
    p = project(by_hand(100, "samples", 1, "H100-SXM"), "GB300", mfu=0.6)
    s = p["speedup"]
    assert p["regime"] == "compute-bound"
    # low: only the matmul share (MFU / 0.8 = 75%) speeds up by the peak ratio, the rest not at all
    assert s["low"] == pytest.approx(1 / (0.75 / peak + 0.25))
    # high: the rest scales with bandwidth, so it lies between the two ratios
    assert min(peak, bw) <= s["high"] <= max(peak, bw)
    assert s["low"] < s["mid"] < s["high"]
    assert p["kind"] == "projection" and p["assumptions"]


def test_low_mfu_scales_with_bandwidth():
    bw = _ratio("H100-SXM", "H200", "memory_bw_tbs")
    p = project(by_hand(100, "samples", 1, "H100-SXM"), "H200", mfu=0.1)
    assert p["regime"] == "memory-bound"
    assert p["speedup"]["low"] < bw
    assert p["speedup"]["low"] > 1.0


def test_arithmetic_intensity_below_the_ridge_is_memory_bound():
    p = project(by_hand(100, "samples", 1, "H100-SXM"), "VR200", intensity=10.0, bound_fraction=1.0)
    # fully bandwidth-bound: exactly the bandwidth ratio
    assert p["speedup"]["low"] == pytest.approx(_ratio("H100-SXM", "VR200", "memory_bw_tbs"))


def test_unknown_measured_gpu_cannot_be_projected():
    with pytest.raises(UsageError, match="measured GPU is unknown"):
        project(by_hand(100, "samples"), "GB300")


def test_projection_error_when_both_ends_are_measured():
    p = project(by_hand(100, "samples", 1, "H100-SXM"), "H200", mfu=0.5)
    e = projection_error(p, p["per_gpu_throughput"]["mid"] * 1.1)
    assert e["error_mid"] == pytest.approx(1 / 1.1 - 1)
