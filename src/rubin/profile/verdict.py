"""One verdict per profile, in the doctor's style: finding, evidence, cause, fix.

The rules run in order and the first that holds is the verdict; the others that hold are listed
as ``also``. Thresholds are shares of the median step, chosen so that a healthy run (most of the
step in compute kernels) passes none of them.
"""

from __future__ import annotations

import statistics

DATA_SHARE = 0.25  # data loading above a quarter of the step
COMM_SHARE = 0.25  # communication not hidden under compute above a quarter of the step
IDLE_SHARE = 0.30  # the device idle (GPU) or no operator running (CPU) for this share of the step
SMALL_MEDIAN_US = 20.0  # median kernel shorter than this: launch overhead dominates
HOST_OPS_PER_STEP = 1000  # CPU: this many leaf operators per step ...
HOST_OP_US = 60.0  # ... at less host time each than this: dispatch overhead, not arithmetic, is the step
MEMORY_BOUND_SHARE = 0.40  # elementwise, normalisation and reduction kernels above this share of kernel time
SMALL_GEMM_US = 50.0
MEMORY_BOUND_WORDS = ("elementwise", "vectorized", "reduce", "softmax", "norm", "dropout", "copy", "fill")
GEMM_WORDS = ("gemm", "matmul", "xmma", "cutlass", "wgmma")


def _ms(s) -> str:
    return "-" if s is None else f"{1e3 * s:.1f} ms"


def _pct(x) -> str:
    return f"{100 * x:.0f}%"


def _finding(id_, title, evidence, cause, fix) -> dict:
    return {"id": id_, "finding": title, "evidence": evidence, "cause": cause, "fix": fix}


def _mean_of(ranks, key):
    vals = [r["median"].get(key) for r in ranks if r.get("median") and r["median"].get(key) is not None]
    return statistics.median(vals) if vals else None


def _kernel_share(ranks, words) -> tuple[float, float | None]:
    """Share of kernel time in kernels whose names hold one of WORDS, and their mean duration (us)."""
    tot = hit = count = 0.0
    for r in ranks:
        for k in r.get("top_kernels", []):
            if "nccl" in k["name"].lower():
                continue
            tot += k["total_s"]
            if any(w in k["name"].lower() for w in words):
                hit += k["total_s"]
                count += k["count"]
    return (hit / tot if tot else 0.0), (1e6 * hit / count if count else None)


def rules(ranks: list[dict], across: dict) -> list[dict]:
    """Every finding that holds, most important first."""
    step = _mean_of(ranks, "step_s") or 0.0
    if step <= 0:
        return []
    gpu = any(r.get("device") == "gpu" for r in ranks)
    out = []
    s = across.get("straggler")
    if s:
        part = {"data": "data loading", "compute": "compute", "memcpy": "host-device copies",
                "host_only": "host work while its GPU idles", "idle": "host time outside any operator (Python, waits)"}[s["bottleneck"]]
        where = f" on host {s['host']}" if s.get("host") else ""
        fix = (["check that host's storage and CPU load; raise data.num_workers; compare `rubin doctor` there and on a fast host"]
               if s["bottleneck"] == "data" else
               ["rank 0 writes the run's files and console: log less often (telemetry.log_every_steps), fewer sinks",
                "look for Python work outside operators on that rank (callbacks, host syncs) in its trace"]
               if s["bottleneck"] == "idle" and s["rank"] == 0 else
               [f"run `rubin doctor --deep` on {s.get('host') or 'that host'} (clocks, thermals, XID errors, PCIe link)",
                "look for other processes on that host or GPU (nvidia-smi), and compare its trace with a fast rank's"])
        out.append(_finding(
            "straggler", f"one slow rank: rank {s['rank']}{where} holds the others back",
            f"the other ranks wait {_ms(s['waited_for_s'])} per step in collectives for it ({_pct(s['share'])} of a "
            f"{_ms(step)} step); its {part} takes {_ms(s['excess_s'][s['bottleneck'] + '_s'])} more than theirs",
            f"rank {s['rank']}'s {part} is slower than its peers', and every collective waits for the last rank", fix))
    data = _mean_of(ranks, "data_s") or 0.0
    if data > DATA_SHARE * step:
        out.append(_finding(
            "data-bound", "data-bound: the step waits for the data loader",
            f"{_ms(data)} of a {_ms(step)} step ({_pct(data / step)}) is spent waiting for the next batch",
            "the loader produces batches slower than the model consumes them",
            ["raise data.num_workers (one process per core it can spare)", "pin host memory (data.pin_memory=true) on a GPU",
             "move the data to faster local storage, or pre-process (tokenise, decode, resize) once ahead of training"]))
    comm = _mean_of(ranks, "comm_s") or 0.0
    if comm > COMM_SHARE * step and not s:
        overlap = _mean_of(ranks, "overlap")
        out.append(_finding(
            "comm-bound", "communication-bound: collectives not hidden under compute",
            f"{_ms(comm)} of a {_ms(step)} step ({_pct(comm / step)}) in collectives with nothing to overlap"
            + (f"; {_pct(overlap)} of communication overlaps compute" if overlap is not None else ""),
            "gradient all-reduce (DDP) or all-gather/reduce-scatter (FSDP) is exposed on the critical path",
            ["overlap more: keep DDP's bucketing on, larger buckets (bucket_cap_mb), FSDP prefetch",
             "grow the micro-batch or use gradient accumulation so compute covers communication",
             "check the interconnect with `rubin doctor --deep` (NVLink, InfiniBand, NCCL bus bandwidth)"]))
    idle = _mean_of(ranks, "idle_s") or 0.0
    g = [r.get("granularity", {}) for r in ranks]
    per_step = statistics.median([x.get("kernels_per_step" if gpu else "ops_per_step") or 0 for x in g]) if g else 0
    if gpu:
        meds = [x["kernel_median_us"] for x in g if x.get("kernel_median_us") is not None]
        med = statistics.median(meds) if meds else None
        small = idle > IDLE_SHARE * step and med is not None and med < SMALL_MEDIAN_US
        evidence = (f"{per_step:.0f} kernels per step, median {med or 0:.1f} us each; the GPU is idle "
                    f"{_pct(idle / step)} of the step")
    else:  # a CPU trace: operators each cost a fixed dispatch; thousands of them with little work each
        comp = _mean_of(ranks, "compute_s") or 0.0
        cost = 1e6 * comp / per_step if per_step else None
        small = per_step >= HOST_OPS_PER_STEP and cost is not None and cost < HOST_OP_US
        evidence = f"{per_step:.0f} operators per step at {cost or 0:.0f} us of host time each ({_ms(comp)} of compute)"
    if small:
        out.append(_finding(
            "launch-bound" if gpu else "host-bound",
            ("launch-bound: the GPU is idle between small kernels" if gpu
             else "host-bound (launch-bound on a GPU): the step is thousands of tiny operators"), evidence,
            "each operator costs a fixed dispatch (and on a GPU a kernel launch) that dwarfs its work",
            ["compile the model (distributed.compile=true) to fuse small operators",
             "on a GPU, capture the step with CUDA graphs (torch.compile mode='reduce-overhead')",
             "grow the micro-batch so each operator does more work"]))
    if gpu:
        share, _ = _kernel_share(ranks, MEMORY_BOUND_WORDS)
        if share > MEMORY_BOUND_SHARE:
            out.append(_finding(
                "memory-bound", "memory-bound kernels dominate the GPU time",
                f"elementwise, normalisation and reduction kernels take {_pct(share)} of kernel time",
                "these kernels move bytes and do little arithmetic: HBM bandwidth, not FLOPs, limits them",
                ["compile the model (distributed.compile=true) to fuse them", "use fused optimizers and fused norms",
                 "bf16 halves the bytes they move"]))
        share, mean_us = _kernel_share(ranks, GEMM_WORDS)
        if share > 0.3 and mean_us is not None and mean_us < SMALL_GEMM_US:
            out.append(_finding(
                "small-matmuls", "too-small matmuls: the tensor cores are underfed",
                f"matmul kernels take {_pct(share)} of kernel time at a mean of {mean_us:.0f} us each",
                "matrices this small cannot fill the GPU's SMs",
                ["grow the micro-batch (or sequence length)", "widen the layers, or pad dimensions to multiples of 64"]))
    return out


def verdict(ranks: list[dict], across: dict) -> dict:
    found = rules(ranks, across)
    if found:
        return {**found[0], "also": [f["id"] for f in found[1:]]}
    step = _mean_of(ranks, "step_s") or 0.0
    comp = _mean_of(ranks, "compute_s") or 0.0
    share = comp / step if step else 0.0
    return _finding("compute-bound", "compute-bound: no bottleneck outside the model's own compute",
                    f"{_pct(share)} of a {_ms(step)} step is compute", "the step is as fast as its kernels",
                    ["bf16 autocast, compile, fused optimizers; then a larger micro-batch if memory allows"]) | {"also": []}


def one_line(v: dict) -> str:
    return f"{v['finding']}. evidence: {v['evidence']}. cause: {v['cause']}. fix: {v['fix'][0]}"
