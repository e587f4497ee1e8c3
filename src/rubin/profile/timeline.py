"""Interval arithmetic over trace events, and which class each event belongs to.

Times are microseconds, as in the Chrome trace format. An interval list is sorted and
non-overlapping after ``merge``; the set operations below keep it that way.
"""

from __future__ import annotations

import re

# Collectives by the names PyTorch gives them: NCCL kernels, gloo's annotations, c10d's operators.
COMM_RE = re.compile(r"nccl|gloo:|c10d::|record_param_comms|ProcessGroup", re.IGNORECASE)
DATA_PREFIX = "enumerate(DataLoader)"
STEP_PREFIX = "ProfilerStep#"
GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
HOST_CATS = {"cpu_op", "user_annotation", "python_function"}


def merge(spans) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def total(spans) -> float:
    return sum(b - a for a, b in spans)


def intersect(xs, ys) -> list[tuple[float, float]]:
    """The parts of merged XS that are also in merged YS."""
    out, i, j = [], 0, 0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if a < b:
            out.append((a, b))
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(xs, ys) -> list[tuple[float, float]]:
    """The parts of merged XS not in merged YS."""
    out, j = [], 0
    for a, b in xs:
        cur = a
        while j < len(ys) and ys[j][1] <= cur:
            j += 1
        k = j
        while k < len(ys) and ys[k][0] < b:
            if ys[k][0] > cur:
                out.append((cur, ys[k][0]))
            cur = max(cur, ys[k][1])
            k += 1
        if cur < b:
            out.append((cur, b))
    return out


def clip(spans, lo: float, hi: float) -> list[tuple[float, float]]:
    return [(max(a, lo), min(b, hi)) for a, b in spans if b > lo and a < hi]


def span(e: dict) -> tuple[float, float]:
    ts = float(e["ts"])
    return ts, ts + float(e.get("dur") or 0.0)


def is_complete(e: dict) -> bool:
    return e.get("ph") == "X" and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))


def gpu_class(e: dict) -> str | None:
    """'comm', 'kernel', 'memcpy' or 'memset' for a device event; None for a host event."""
    kind = GPU_CATS.get(e.get("cat"))
    if kind == "kernel" and COMM_RE.search(e.get("name", "")):
        return "comm"
    return kind


def host_class(e: dict) -> str | None:
    """'step', 'data', 'comm' or 'op' for a host event on the training thread; None otherwise."""
    if e.get("cat") not in HOST_CATS:
        return None
    name = e.get("name", "")
    if name.startswith(STEP_PREFIX):
        return "step"
    if name.startswith(DATA_PREFIX):
        return "data"
    if COMM_RE.search(name):
        return "comm"
    return "op"
