"""Kernel launch latency: back-to-back tiny kernels, host time per launch and device time per kernel."""

from __future__ import annotations

from rubin.bench import stats
from rubin.platform import device as dev

NAME = "launch"


def defaults(quick: bool, ctx) -> dict:
    return {"kernels": 200 if quick else 2000, "warmup": 50, "trials": 8 if quick else 20}


def run(params: dict, ctx) -> dict:
    """Kernel launch latency: back-to-back tiny kernels. ``wall_us`` is host time per launch
    (enqueue, then one sync at the end, as SuperBench kernel-launch wall_time); ``event_us`` is
    device time per kernel (CUDA events). On CPU both are the dispatch cost of a tiny op."""
    import time

    import torch

    rows, summary = [], {}
    for device in ctx.devices:
        ctx.progress(f"launch latency on {device}")
        x = torch.zeros(1, device=device)
        for _ in range(params["warmup"]):
            x.add_(1)
        dev.synchronize(device)
        wall, event = [], []
        for _ in range(params["trials"]):
            t = dev.timer(device)
            t0 = time.perf_counter()
            t.start()
            for _ in range(params["kernels"]):
                x.add_(1)
            t.stop()
            dev.synchronize(device)
            wall.append((time.perf_counter() - t0) / params["kernels"] * 1e6)
            event.append(t.elapsed_s() / params["kernels"] * 1e6)
        w, e = stats.summarize(wall), stats.summarize(event)
        rows.append({"device": str(device), "op": "tiny_kernel", "kernels": params["kernels"], "wall_us": w, "event_us": e})
        summary[str(device)] = {"wall_us": w["median"], "event_us": e["median"]}
    return {"rows": rows, "summary": summary,
            "method": {"kernel": "x.add_(1) on a 1-element tensor", "kernels_per_trial": params["kernels"],
                       "wall_us": "host time per launch incl. final sync", "event_us": "device time per kernel"}}
