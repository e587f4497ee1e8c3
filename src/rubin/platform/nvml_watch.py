"""What the GPU's clocks and power did while something ran: NVML sampled on a thread.

    with ClockWatch(index=0) as watch:
        ...                       # the measurement
    watch.summary()               # {"sm_clock_mhz": {...}, "power_w": {...}, "throttle_reasons": [...], "capped": ...}

A benchmark figure means little without this: on an H200 a long bf16 sweep runs into the 700 W power
cap and the SM clock falls from 1980 MHz, so the same matmul reads 13% slower than in a short burst.
"Capped" means a sample carried a reason that lowers the clock under load (power, thermal, slowdown),
or the median SM clock sat more than 5% under the maximum. ``gpu_idle`` is not a cap: between two
kernels the GPU is idle, and says so. Without NVML, ``summary()`` returns None.
"""

from __future__ import annotations

import statistics
import threading
import time

from rubin.platform import nvml

# Clock-event reasons that mean "the clock is held down under load".
CAPPING = frozenset({"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"})
CLOCK_SLACK = 0.95


def _spread(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(samples: list[dict], max_clock_mhz: float | None, power_limit_w: float | None) -> dict:
    """Median/min/max of the SM clock and power, the reasons seen (with the share of samples), and the cap flag."""
    clocks = [s["sm_clock_mhz"] for s in samples if s.get("sm_clock_mhz") is not None]
    power = [s["power_w"] for s in samples if s.get("power_w") is not None]
    seen: dict[str, int] = {}
    for s in samples:
        for r in s.get("throttle_reasons") or []:
            seen[r] = seen.get(r, 0) + 1
    capping = sorted(r for r in seen if r in CAPPING)
    clock = _spread(clocks)
    low_clock = bool(clock and max_clock_mhz and clock["median"] < CLOCK_SLACK * max_clock_mhz)
    return {
        "samples": len(samples),
        "sm_clock_mhz": clock,
        "max_sm_clock_mhz": max_clock_mhz,
        "power_w": _spread(power),
        "power_limit_w": power_limit_w,
        "throttle_reasons": {r: round(n / len(samples), 3) for r, n in sorted(seen.items())} if samples else {},
        "capped": bool(capping) or low_clock,
        "capped_by": capping + (["sm_clock_below_95pct_of_max"] if low_clock else []),
    }


class ClockWatch:
    """Samples NVML every ``interval_s`` on a daemon thread between ``__enter__`` and ``__exit__``."""

    def __init__(self, index: int = 0, interval_s: float = 0.02):
        self.index = int(index)
        self.interval_s = interval_s
        self.sampler = nvml.NvmlSampler(self.index)
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _limits(self) -> tuple[float | None, float | None]:
        nv = nvml.get()
        if nv is None:
            return None, None
        clock = nv.try_device(self.index, "nvmlDeviceGetMaxClockInfo", nv.const("NVML_CLOCK_SM", 1))
        limit_mw = nv.try_device(self.index, "nvmlDeviceGetEnforcedPowerLimit")
        return (None if clock is None else float(clock)), (None if limit_mw is None else limit_mw / 1000.0)

    def _loop(self) -> None:
        while True:
            s = self.sampler.sample()
            if s is not None:
                self.samples.append(s)
            if self._stop.wait(self.interval_s):
                return

    def __enter__(self) -> ClockWatch:
        self.samples = []
        if self.sampler.available:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="rubin-clockwatch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self.sampler.available and not self.samples:  # a measurement shorter than one interval: one sample after
            s = self.sampler.sample()
            if s is not None:
                self.samples.append(s)

    def summary(self) -> dict | None:
        if not self.sampler.available:
            return None
        return summarize(self.samples, *self._limits())


def wait_until_cool(index: int = 0, *, max_s: float, below_w: float | None = None, poll_s: float = 0.1) -> float:
    """Sleep until the GPU's power draw falls under ``below_w`` (default: a quarter of its limit), at most
    ``max_s``; returns the seconds waited. Without NVML it sleeps ``max_s``: a fixed cool-down is the fallback."""
    start = time.perf_counter()
    nv = nvml.get()
    if nv is None or max_s <= 0:
        time.sleep(max(max_s, 0.0))
        return time.perf_counter() - start
    if below_w is None:
        limit_mw = nv.try_device(index, "nvmlDeviceGetEnforcedPowerLimit")
        below_w = 0.25 * limit_mw / 1000.0 if limit_mw else 150.0
    while time.perf_counter() - start < max_s:
        mw = nv.try_device(index, "nvmlDeviceGetPowerUsage")
        if mw is None or mw / 1000.0 <= below_w:
            break
        time.sleep(poll_s)
    return time.perf_counter() - start
