"""ClockWatch: NVML sampled while a measurement runs, and what counts as a capped clock."""

from __future__ import annotations

import copy
import json
import threading
from pathlib import Path

import pytest

from rubin.platform import nvml, nvml_fake
from rubin.platform.nvml_watch import ClockWatch, summarize, wait_until_cool

H200 = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "doctor" / "nvml" / "h200_recorded.json").read_text())


@pytest.fixture(autouse=True)
def _restore_nvml():
    yield
    nvml.reset()


def _sample(clock, power=650.0, reasons=()):
    return {"sm_clock_mhz": clock, "power_w": power, "throttle_reasons": list(reasons)}


def test_full_clock_without_a_capping_reason_is_not_capped():
    s = summarize([_sample(1980), _sample(1965), _sample(1980)], max_clock_mhz=1980, power_limit_w=700)
    assert s["capped"] is False and s["capped_by"] == []
    assert s["sm_clock_mhz"] == {"median": 1980, "min": 1965, "max": 1980}


def test_power_cap_reason_flags_the_measurement_and_says_how_often():
    samples = [_sample(1980), _sample(1755, 699, ["sw_power_cap"]), _sample(1740, 700, ["sw_power_cap"])]
    s = summarize(samples, max_clock_mhz=1980, power_limit_w=700)
    assert s["capped"] is True and s["capped_by"] == ["sw_power_cap", "sm_clock_below_95pct_of_max"]
    assert s["throttle_reasons"] == {"sw_power_cap": pytest.approx(2 / 3, abs=1e-3)}
    assert s["power_w"]["max"] == 700


def test_idle_between_kernels_is_not_a_cap_but_a_low_median_clock_is():
    idle = summarize([_sample(1980, 90, ["gpu_idle"])] * 3, max_clock_mhz=1980, power_limit_w=700)
    assert idle["capped"] is False
    low = summarize([_sample(1800)] * 3, max_clock_mhz=1980, power_limit_w=700)  # 91% of max, no reason given
    assert low["capped"] is True and low["capped_by"] == ["sm_clock_below_95pct_of_max"]


def test_watch_over_the_recorded_h200_sees_the_clock_fall_under_the_power_cap():
    data = copy.deepcopy(H200)
    dev = data["devices"][0]
    dev["nvmlDeviceGetClockInfo:1"], dev["nvmlDeviceGetCurrentClocksEventReasons"] = 1980, 0
    fake = nvml_fake.fake_nvml(data)
    nvml.set_for_tests(fake)
    watch = ClockWatch(0, interval_s=0.001)
    with watch:
        _wait_for(lambda: len(watch.samples) >= 1)
        # What a long bf16 sweep does on the recorded machine: the 700 W cap holds the SM clock down.
        dev["nvmlDeviceGetClockInfo:1"], dev["nvmlDeviceGetCurrentClocksEventReasons"] = 1755, 0x4
        dev["nvmlDeviceGetPowerUsage"] = 699_500
        _wait_for(lambda: any(s["sm_clock_mhz"] == 1755 for s in list(watch.samples)))
    s = watch.summary()
    assert s["max_sm_clock_mhz"] == 1980 and s["power_limit_w"] == 700  # the recording's max clock and limit
    assert s["sm_clock_mhz"]["min"] == 1755 and s["sm_clock_mhz"]["max"] == 1980
    assert s["capped"] is True and "sw_power_cap" in s["capped_by"]
    assert s["power_w"]["max"] == pytest.approx(699.5)
    n = len(watch.samples)
    assert not any(t.name == "rubin-clockwatch" for t in threading.enumerate())  # the thread ended with the block
    assert len(watch.samples) == n


def test_without_nvml_the_watch_has_no_summary():
    nvml.set_for_tests(None, "nvidia-ml-py is not installed", "LIBRARY_NOT_FOUND")
    with ClockWatch(0) as watch:
        pass
    assert watch.summary() is None


def test_cool_down_returns_once_power_is_under_a_quarter_of_the_limit():
    data = copy.deepcopy(H200)  # recorded idle: 80.9 W of 700 W
    nvml.set_for_tests(nvml_fake.fake_nvml(data))
    assert wait_until_cool(0, max_s=30.0) < 5.0  # already cool: no wait for the full 30 s
    data["devices"][0]["nvmlDeviceGetPowerUsage"] = 690_000
    nvml.set_for_tests(nvml_fake.fake_nvml(data))
    assert wait_until_cool(0, max_s=0.3, poll_s=0.01) >= 0.3  # hot: waits the whole allowance


def _wait_for(cond, timeout=10.0):
    done = threading.Event()
    deadline = threading.Timer(timeout, done.set)
    deadline.start()
    try:
        while not cond():
            if done.wait(0.001):
                raise AssertionError("condition not met in time")
    finally:
        deadline.cancel()
