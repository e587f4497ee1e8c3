"""``probe()``: collect every fact about this machine into one ``Facts`` object.

The concept probes (system, driver, gpu, interconnect, software, environment) run concurrently,
each under a deadline; every external command inside has its own timeout. A probe that fails or
runs out of time leaves its facts "unknown" with the reason; it never crashes ``probe()``. CUDA is
never initialized in this process: GPU facts come from NVML, torch.cuda answers from a subprocess.
"""

from __future__ import annotations

import concurrent.futures as cf
import datetime as _dt
import time

from rubin.platform import probe_driver, probe_environment, probe_gpu, probe_interconnect, probe_software, probe_system
from rubin.platform.facts import (
    DriverFacts,
    EnvironmentFacts,
    Facts,
    InterconnectFacts,
    SoftwareFacts,
    SystemFacts,
    unknown,
)
from rubin.platform.sources import Sources

GROUP_DEADLINE_S = 40.0  # the torch subprocess is the slow one (import torch: 1-10 s)


def _timed_out(model_cls, reason: str):
    obj = model_cls()
    for name in type(obj).model_fields:
        setattr(obj, name, unknown(reason, name))
    return obj


def probe(src: Sources | None = None, *, ask_torch: bool = True, deadline_s: float = GROUP_DEADLINE_S) -> Facts:
    src = src or Sources()
    t0 = time.perf_counter()
    timings: dict[str, float] = {}

    def timed(name, fn, *args, **kw):
        def run():
            s = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                timings[name] = round(time.perf_counter() - s, 4)
        return run

    def gpu_and_interconnect():
        gpus = probe_gpu.probe(src)
        inter = probe_interconnect.probe(src, want_topology=bool(gpus.get([])))
        return gpus, inter

    jobs = {
        "system": (timed("system", probe_system.probe, src), SystemFacts),
        "driver": (timed("driver", probe_driver.probe, src), DriverFacts),
        "gpu": (timed("gpu", gpu_and_interconnect), None),
        "software": (timed("software", probe_software.probe, src, ask_torch=ask_torch), SoftwareFacts),
        "environment": (timed("environment", probe_environment.probe, src), EnvironmentFacts),
    }
    results = {}
    pool = cf.ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="rubin-probe")
    futures = {name: pool.submit(fn) for name, (fn, _) in jobs.items()}
    end = time.perf_counter() + deadline_s
    for name, fut in futures.items():
        try:
            results[name] = fut.result(timeout=max(end - time.perf_counter(), 0.01))
        except cf.TimeoutError:
            results[name] = f"the {name} probe did not finish within {deadline_s:g}s"
        except Exception as exc:  # noqa: BLE001 - a bug in one probe must not hide the others
            results[name] = f"the {name} probe failed: {type(exc).__name__}: {exc}"
    pool.shutdown(wait=False, cancel_futures=True)

    facts = Facts(collected_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    for name, (_, cls) in jobs.items():
        value = results[name]
        if name == "gpu":
            if isinstance(value, str):
                facts.gpus = unknown(value, "NVML")
                facts.interconnect = _timed_out(InterconnectFacts, value)
            else:
                facts.gpus, facts.interconnect = value
            continue
        setattr(facts, name, _timed_out(cls, value) if isinstance(value, str) else value)
    facts.duration_s = round(time.perf_counter() - t0, 4)
    facts.probe_seconds = dict(sorted(timings.items()))
    return facts
