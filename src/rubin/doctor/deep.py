"""``rubin doctor --deep``: active checks, each in its own subprocess with a timeout.

- per GPU: a 256 MiB allocation and a 1024x1024 matmul checked against the CPU result;
- a 2-rank all-reduce: NCCL on GPUs 0 and 1 when there are two, gloo on the CPU otherwise. When it
  fails, the finding names the rank that failed first (the others usually only time out waiting).
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import socket
import subprocess
import sys
import time

from rubin.doctor.findings import Finding


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _parse(stdout: str) -> dict | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith("RUBIN-DEEP "):
            return json.loads(line.split(" ", 1)[1])
    return None


def _cmd(*args) -> list[str]:
    return [sys.executable, "-m", "rubin.doctor.deep_worker", *map(str, args)]


def gpu_check(index: int, timeout_s: float) -> Finding:
    fid = f"deep.gpu.{index}"
    try:
        proc = subprocess.run(_cmd("gpu", index), capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return Finding(fid, "deep.gpu", "error", f"GPU {index}: alloc + matmul did not finish in {timeout_s:g}s", gpu=index,
                       evidence="subprocess timed out", cause="the GPU hangs (a stuck context, a fault, or another job holding it)",
                       fix=["nvidia-smi; sudo dmesg | grep -i xid", "reset the GPU or reboot"])
    res = _parse(proc.stdout) or {"ok": False, "error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    if res.get("ok"):
        return Finding(fid, "deep.gpu", "ok", f"GPU {index}: 256 MiB alloc + 1024^2 matmul correct in {res['seconds']:.2f}s", gpu=index,
                       evidence=f"{res.get('name')} cc {res.get('capability')}; max abs error {res.get('max_abs_err'):.2e}")
    return Finding(fid, "deep.gpu", "error", f"GPU {index}: the CUDA smoke test failed", gpu=index,
                   evidence=res.get("error") or f"max abs error {res.get('max_abs_err')}",
                   cause="CUDA cannot allocate or compute correctly on this GPU",
                   fix=["rubin doctor --explain '<the error above>'", "dcgmi diag -r 2"])


def allreduce_check(backend: str, timeout_s: float, world: int = 2, fail_rank: int | None = None) -> Finding:
    port = _free_port()
    env = dict(os.environ)
    if backend == "gloo":
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # both ranks are local; avoid picking an unreachable NIC
    procs, started = [], time.perf_counter()
    for r in range(world):
        procs.append(subprocess.Popen(_cmd("allreduce", r, world, port, backend, int(r == fail_rank), max(timeout_s - 5, 5)),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    results, exit_order = {}, []
    deadline = started + timeout_s
    grace_end = None  # once a rank failed, the others get a few seconds, then they are only waiting for it
    while len(exit_order) < world and time.perf_counter() < min(deadline, grace_end or deadline):
        for r, p in enumerate(procs):
            if r not in exit_order and p.poll() is not None:
                exit_order.append(r)
                if p.returncode != 0 and grace_end is None:
                    grace_end = time.perf_counter() + 3.0
        time.sleep(0.05)
    for r, p in enumerate(procs):
        if p.poll() is None:
            p.kill()
            results[r] = {"ok": False, "error": "still waiting when stopped (blocked on the failed rank)" if grace_end
                          else f"timed out after {timeout_s:g}s"}
            p.communicate()
            continue
        out, err = p.communicate()
        results[r] = _parse(out) or {"ok": False, "error": (err.strip().splitlines() or [f"exit {p.returncode}"])[-1][:600]}
    fid = f"deep.allreduce.{backend}"
    if all(res.get("ok") for res in results.values()):
        secs = max(res.get("seconds", 0) for res in results.values())
        return Finding(fid, "deep.allreduce", "ok", f"{world}-rank {backend} all-reduce correct ({secs:.2f}s)",
                       evidence="; ".join(f"rank {r}: {res['value']} (expected {res['expected']})" for r, res in sorted(results.items())))
    failed = [r for r in exit_order if not results[r].get("ok")] + [r for r in range(world) if r not in exit_order]
    first = failed[0]
    return Finding(fid, "deep.allreduce", "error", f"{world}-rank {backend} all-reduce failed: rank {first} failed first",
                   evidence="; ".join(f"rank {r}: {results[r].get('error', 'ok')}" for r in range(world)),
                   cause=f"rank {first} failed before or during the collective; the other ranks then time out waiting for it",
                   fix=["read rank {}'s error above".format(first), "NCCL_DEBUG=INFO rubin doctor --deep for the transport details",
                        "rubin doctor --explain '<the error>'"])


def run_all(facts, timeout_s: float = 60.0) -> list[Finding]:
    """Every deep check at once: each is a subprocess that spends most of its time importing torch and
    starting CUDA, so running them side by side costs the slowest one, not the sum (on the recorded
    H200, one after another took 12 s of the 17.7 s). Findings come back in a fixed order."""
    out = []
    gpus = facts.gpu_list()
    if not gpus:
        out.append(Finding("deep.gpu", "deep.gpu", "info", "no GPU: the CUDA alloc + matmul test was skipped",
                           evidence=f"NVML: {facts.gpus.show()}"))
    usable = bool(gpus) and facts.software.torch_cuda.get() and facts.software.torch_cuda_available.get() is not False
    backend = "nccl" if usable and len(gpus) >= 2 else "gloo"
    jobs = [(gpu_check, g.index, timeout_s) for g in (gpus if usable else [])] + [(allreduce_check, backend, timeout_s)]
    with cf.ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="rubin-deep") as pool:
        futures = [pool.submit(fn, *args) for fn, *args in jobs]
        out.extend(f.result() for f in futures)
    return out
