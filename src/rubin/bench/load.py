"""How busy the machine was while a benchmark ran, and which figures are too noisy to act on.

A benchmark on a busy machine measures the other work as much as the machine: on a shared 2-core
box a 256^3 matmul read 0.006 TFLOPS with a 95% interval 90x wide. So each benchmark records the
load around it (load average, the CPU share of other processes, other processes on each GPU), and
the results file lists the figures whose interval is wider than ``NOISY_SPREAD`` of their median.
``rubin compare`` marks any verdict built on such a figure or on a contended benchmark.
"""

from __future__ import annotations

import os
import resource
import time

CONTENDED_SHARE = 0.25  # other processes used more than a quarter of the CPUs' time while it ran
NOISY_SPREAD = 0.5  # a 95% interval wider than half the median is not a figure to compare


def _cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) clock ticks of all CPUs since boot, from /proc/stat; None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already inside user
    return total - idle, total


def _own_cpu_s() -> float:
    """CPU seconds of this process and its reaped children (the collectives and io workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _gpus_in_use_by_others() -> list[dict] | None:
    """Per GPU: processes of other programs running on it (NVML); None without NVML."""
    from rubin.platform import nvml

    lib = nvml.get()
    if lib is None:
        return None
    mine = os.getpid()
    out = []
    try:
        for i in range(lib.device_count()):
            procs = lib.try_device(i, "nvmlDeviceGetComputeRunningProcesses", default=[]) or []
            util = lib.try_device(i, "nvmlDeviceGetUtilizationRates")
            pids = [p.get("pid") if isinstance(p, dict) else getattr(p, "pid", None) for p in procs]
            others = [pid for pid in pids if pid not in (mine, None) and _not_my_child(pid)]
            out.append({"index": i, "other_processes": len(others), "util_pct": getattr(util, "gpu", None)})
    except nvml.NvmlError:
        return None
    return out


def _not_my_child(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1]) != os.getpid()
    except (OSError, ValueError, IndexError):
        return True


class Meter:
    """Started before one benchmark, read after it: the load it ran under."""

    def __init__(self):
        self.t0 = time.monotonic()
        self.ticks0 = _cpu_ticks()
        self.own0 = _own_cpu_s()
        self.load0 = _loadavg()

    def read(self) -> dict:
        ticks, own = _cpu_ticks(), _own_cpu_s()
        share = None
        if ticks and self.ticks0 and ticks[1] > self.ticks0[1]:
            hz = os.sysconf("SC_CLK_TCK")
            busy_s = (ticks[0] - self.ticks0[0]) / hz
            total_s = (ticks[1] - self.ticks0[1]) / hz
            share = max(0.0, min(1.0, (busy_s - (own - self.own0)) / total_s))
        gpus = _gpus_in_use_by_others()
        contended = bool((share is not None and share > CONTENDED_SHARE) or any(g["other_processes"] for g in gpus or []))
        return {"cpus": os.cpu_count(), "load_avg_1m": [self.load0, _loadavg()], "others_cpu_share": share,
                "gpus": gpus, "contended": contended}


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def quality(doc: dict) -> dict:
    """The results' quality section: contended benchmarks and noisy figures (spread = interval / median)."""
    from rubin.bench import metrics

    noisy = []
    for key, m in metrics.flatten(doc).items():
        fig = m["figure"]
        lo, hi = (fig.get("ci95") or [None, None])[:2]
        med = fig.get("median")
        if med and lo is not None and hi is not None and (hi - lo) / abs(med) > NOISY_SPREAD:
            noisy.append({"metric": key, "spread": round((hi - lo) / abs(med), 3)})
    contended = [name for name, e in doc.get("benchmarks", {}).items() if (e.get("load") or {}).get("contended")]
    return {"noisy_spread_above": NOISY_SPREAD, "contended_share_above": CONTENDED_SHARE,
            "contended": contended, "noisy": noisy}


def caveats(doc: dict, label: str) -> list[str]:
    """One line per reason this file's figures are weak evidence ([] for a clean file, or an older one)."""
    q = doc.get("quality")
    if not isinstance(q, dict):
        return []
    out = []
    if q.get("contended"):
        out.append(f"{label}: measured under load from other processes ({', '.join(q['contended'])})")
    if q.get("noisy"):
        out.append(f"{label}: {len(q['noisy'])} figure(s) with a 95% interval wider than "
                   f"{q.get('noisy_spread_above', NOISY_SPREAD):.0%} of the median")
    return out
