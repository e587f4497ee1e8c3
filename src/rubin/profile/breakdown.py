"""One rank: where each profiled step's time went, comm/compute overlap, the top kernels and operators.

On a GPU trace the breakdown is of the device's time: compute kernels, communication kernels
(not hidden under compute), memcpy/memset, and idle; of the idle time, the part where the host
was busy (``host_only``: the GPU waits on Python, launches or the loader) and the part spent
waiting for data. On a CPU-only trace the host is the device: its operators are the compute,
collectives it blocks in (an operator of c10d, or no operator while gloo's thread runs one) are the
communication, and time in no operator is idle (Python between operators, sleeps).
Each figure is the median over the profiled steps, in seconds.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict

from rubin.profile import timeline as tl

TOP = 10
TINY_US = 20.0  # an operator or kernel shorter than this is mostly launch and dispatch overhead


def _main_tid(events):
    tids = Counter((e.get("pid"), e.get("tid")) for e in events if tl.host_class(e) == "step")
    if tids:
        return tids.most_common(1)[0][0]
    ops = Counter((e.get("pid"), e.get("tid")) for e in events if tl.host_class(e) == "op")
    return ops.most_common(1)[0][0] if ops else None


def _self_times(events) -> dict[int, float]:
    """Self time (duration minus direct children) of each host event on one thread, by index."""
    order = sorted(range(len(events)), key=lambda i: (events[i]["ts"], -events[i]["dur"]))
    own, stack = {}, []
    for i in order:
        a, b = tl.span(events[i])
        while stack and a >= tl.span(events[stack[-1]])[1]:
            stack.pop()
        own[i] = float(events[i]["dur"])
        if stack:
            own[stack[-1]] -= float(events[i]["dur"])
        stack.append(i)
    return {i: max(v, 0.0) for i, v in own.items()}


def _top(rows: dict, n_steps: int) -> list[dict]:
    out = [{"name": k, "count": v["count"], "total_s": v["total"] / 1e6, "per_step_s": v["total"] / 1e6 / max(n_steps, 1),
            "mean_us": v["total"] / max(v["count"], 1)} for k, v in rows.items()]
    out.sort(key=lambda r: -r["total_s"])
    return out[:TOP]


def analyse(events: list[dict]) -> dict:
    """The breakdown of one rank's trace; see the module docstring for the categories."""
    events = [e for e in events if tl.is_complete(e)]
    main = _main_tid(events)
    host = [e for e in events if (e.get("pid"), e.get("tid")) == main and tl.host_class(e) is not None]
    device = [e for e in events if tl.gpu_class(e) is not None]
    steps = sorted((tl.span(e) for e in host if tl.host_class(e) == "step"))
    if not steps:  # a trace recorded without a schedule: the whole extent is one step
        ext = [tl.span(e) for e in host + device]
        steps = [(min(a for a, _ in ext), max(b for _, b in ext))] if ext else []
    body = [e for e in host if tl.host_class(e) != "step"]
    busy = tl.merge(tl.span(e) for e in body)
    data = tl.merge(tl.span(e) for e in body if tl.host_class(e) == "data")
    comm_host = tl.subtract(tl.merge(tl.span(e) for e in body if tl.host_class(e) == "comm"), data)
    side_comm = tl.merge(tl.span(e) for e in events if (e.get("pid"), e.get("tid")) != main
                         and tl.host_class(e) == "comm")  # gloo's worker threads: asynchronous collectives
    # on a GPU, backward runs on autograd's own thread: any thread of the process that runs operators keeps the host busy
    host_any = tl.merge(tl.span(e) for e in events if e.get("pid") == (main or (None,))[0] and tl.host_class(e) in ("op", "data"))
    gpu = {k: tl.merge(tl.span(e) for e in device if tl.gpu_class(e) == k) for k in ("kernel", "comm", "memcpy", "memset")}
    on_gpu = bool(device)
    per_step: list[dict] = []
    for lo, hi in steps:
        c = {k: tl.clip(v, lo, hi) for k, v in gpu.items()}
        b, d = tl.clip(busy, lo, hi), tl.clip(data, lo, hi)
        row = {"step_s": hi - lo}
        if on_gpu:
            comm_only = tl.subtract(c["comm"], c["kernel"])
            copies = tl.subtract(tl.merge(c["memcpy"] + c["memset"]), tl.merge(c["kernel"] + c["comm"]))
            active = tl.merge(c["kernel"] + c["comm"] + c["memcpy"] + c["memset"])
            idle = tl.subtract([(lo, hi)], active)
            host_busy = tl.clip(host_any, lo, hi)
            row.update(compute_s=tl.total(c["kernel"]), comm_s=tl.total(comm_only), memcpy_s=tl.total(copies),
                       idle_s=tl.total(idle), host_only_s=tl.total(tl.intersect(idle, host_busy)), data_s=tl.total(tl.intersect(idle, d)),
                       comm_total_s=tl.total(c["comm"]), overlap_s=tl.total(tl.intersect(c["comm"], c["kernel"])))
        else:
            side = tl.clip(side_comm, lo, hi)
            gaps = tl.subtract([(lo, hi)], b)
            # the training thread in no operator while a collective runs on gloo's thread: it waits for that collective
            ch = tl.merge(tl.clip(comm_host, lo, hi) + tl.intersect(gaps, side))
            compute = tl.subtract(tl.subtract(b, d), ch)
            row.update(compute_s=tl.total(compute), comm_s=tl.total(ch), memcpy_s=0.0, data_s=tl.total(d),
                       idle_s=tl.total(tl.subtract(gaps, ch)), host_only_s=None,
                       comm_total_s=tl.total(tl.merge(ch + side)), overlap_s=tl.total(tl.intersect(side, compute)))
        per_step.append({k: (v / 1e6 if v is not None else None) for k, v in row.items()})
    return {"steps": len(per_step), "device": "gpu" if on_gpu else "cpu", "per_step": per_step,
            "median": _medians(per_step), **_tops(host, device, len(per_step), steps)}


def _medians(per_step: list[dict]) -> dict:
    if not per_step:
        return {}
    out = {k: statistics.median([r[k] for r in per_step]) for k in per_step[0] if per_step[0][k] is not None}
    out["overlap"] = (out["overlap_s"] / out["comm_total_s"]) if out.get("comm_total_s") else None
    return out


def _tops(host: list[dict], device: list[dict], n_steps: int, steps) -> dict:
    lo, hi = (steps[0][0], steps[-1][1]) if steps else (float("-inf"), float("inf"))
    inside = [e for e in host if tl.host_class(e) != "step" and lo <= e["ts"] < hi]
    own = _self_times(inside)
    ops: dict = defaultdict(lambda: {"count": 0, "total": 0.0})
    leaf = [own[i] for i, e in enumerate(inside) if e.get("cat") == "cpu_op" and own[i] >= float(e["dur"]) - 1e-9]
    for i, e in enumerate(inside):
        if e.get("cat") == "cpu_op":
            ops[e["name"]]["count"] += 1
            ops[e["name"]]["total"] += own[i]
    kernels: dict = defaultdict(lambda: {"count": 0, "total": 0.0})
    kdurs = []
    for e in device:
        if tl.gpu_class(e) in ("kernel", "comm") and lo <= e["ts"] < hi:
            kernels[e["name"]]["count"] += 1
            kernels[e["name"]]["total"] += float(e["dur"])
            kdurs.append(float(e["dur"]))
    n = max(n_steps, 1)
    small = {
        "ops_per_step": len(leaf) / n, "op_median_us": statistics.median(leaf) if leaf else None,
        "tiny_op_share": (sum(d for d in leaf if d < TINY_US) / sum(leaf)) if leaf and sum(leaf) else None,
        "kernels_per_step": len(kdurs) / n, "kernel_median_us": statistics.median(kdurs) if kdurs else None,
        "tiny_kernel_share": (sum(d for d in kdurs if d < TINY_US) / sum(kdurs)) if kdurs and sum(kdurs) else None,
    }
    return {"top_ops": _top(ops, n_steps), "top_kernels": _top(kernels, n_steps), "granularity": small}
