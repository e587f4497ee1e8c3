"""The NVML seam: get()/set_for_tests, the fake library, and NvmlSampler."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rubin.platform import nvml, nvml_fake

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "doctor" / "nvml"


@pytest.fixture(autouse=True)
def _restore_nvml():
    yield
    nvml.reset()


def test_set_for_tests_replaces_the_library():
    fake = nvml_fake.fake_nvml(FIX / "h100x8_healthy.json")
    nvml.set_for_tests(fake)
    assert nvml.get() is fake
    assert nvml.get().device_count() == 8
    assert nvml.get().device(0, "nvmlDeviceGetName") == "NVIDIA H100 80GB HBM3"


def test_load_failure_gives_none_and_the_reason():
    with nvml_fake.install(FIX / "init_mismatch.json"):
        assert nvml.get() is None
        msg, name = nvml.load_error()
        assert name == "LIB_RM_VERSION_MISMATCH" and "mismatch" in msg.lower()
    nvml.reset()


def test_real_library_absent_here_returns_none_not_an_exception():
    nvml.reset()
    got = nvml.get()
    if got is None:  # this CPU machine: no libnvidia-ml
        assert nvml.load_error()[1] in ("LIBRARY_NOT_FOUND", "DRIVER_NOT_LOADED")
    else:  # a GPU machine
        assert got.device_count() >= 0


def test_unrecorded_function_is_not_supported():
    nv = nvml_fake.fake_nvml({"devices": [{"nvmlDeviceGetName": "X"}]})
    with pytest.raises(nvml.NvmlError, match="Not Supported") as info:
        nv.device(0, "nvmlDeviceGetPowerUsage")
    assert info.value.name == "NOT_SUPPORTED"


def test_sampler_reads_every_key_from_the_fake():
    data = json.loads((FIX / "h100x8_healthy.json").read_text())
    data["devices"][2]["nvmlDeviceGetCurrentClocksEventReasons"] = 0x4 | 0x40
    data["devices"][2]["nvmlDeviceGetUtilizationRates"] = {"gpu": 97, "memory": 40}
    with nvml_fake.install(data):
        s = nvml.NvmlSampler(2).sample()
    assert set(s) == set(nvml.NvmlSampler.KEYS)
    assert s["util_pct"] == 97.0 and s["power_w"] == pytest.approx(71.234)
    assert s["mem_total_bytes"] == 85520809984 and s["temp_c"] == 31.0 and s["sm_clock_mhz"] == 1980.0
    assert s["throttle_reasons"] == ["sw_power_cap", "hw_thermal_slowdown"]


def test_sampler_without_nvml_returns_none():
    with nvml.override(None, "NVML Shared Library Not Found", "LIBRARY_NOT_FOUND"):
        sampler = nvml.NvmlSampler(0)
        assert not sampler.available and sampler.sample() is None


def test_sampler_unsupported_fields_are_none():
    with nvml_fake.install({"devices": [{"nvmlDeviceGetName": "NVIDIA A10G"}]}):
        s = nvml.NvmlSampler(0).sample()
    assert s["power_w"] is None and s["throttle_reasons"] == [] and s["util_pct"] is None


def test_sampler_for_a_missing_index_is_unavailable():
    with nvml_fake.install(FIX / "vr200x4.json"):
        assert nvml.NvmlSampler(7).sample() is None
        assert nvml.NvmlSampler(3).sample()["mem_total_bytes"] == 309237645312


def test_throttle_names_keeps_unknown_bits():
    assert nvml.throttle_names(0) == []
    assert nvml.throttle_names(0x1 | 0x1000) == ["gpu_idle", "other_0x1000"]


def test_a_recording_replays_the_same_probe_results():
    from rubin.platform import probe_gpu
    from rubin.platform.nvml_record import record
    from rubin.platform.sources import Sources

    original = nvml_fake.fake_nvml(FIX / "h100x8_healthy.json")
    recorded = record(original)
    with nvml_fake.install(FIX / "h100x8_healthy.json"):
        a = probe_gpu.probe(Sources()).value
    with nvml_fake.install(recorded):
        b = probe_gpu.probe(Sources()).value
    assert len(b) == 8 and [g.model_dump() for g in a] == [g.model_dump() for g in b]
    assert recorded["devices"][0]["nvmlDeviceGetTotalEccErrors:1,0"] == 0
