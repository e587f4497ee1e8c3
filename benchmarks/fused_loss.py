"""The chunked linear + cross-entropy against the plain head (logits, fp32 cross-entropy), on this machine.

Each side runs forward + backward of the head and loss alone, in its own fresh process, alternating
which goes first; peak memory is the process's peak RSS above its RSS just before the first step
(on a GPU: the allocator's peak above the inputs). Per side: median step time and spread, median peak;
then the ratios fused/plain. Prints one JSON line per side and round, then a summary line.

    python benchmarks/fused_loss.py [--tokens 2048] [--dim 256] [--vocab 32768] [--chunk 1024] [--rounds 3]
                                    [--device cpu|cuda] [--budget-s 120]

Maintained fused kernels (cut-cross-entropy, Liger) are Triton: CUDA only, so there is no CPU side to them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def child(a) -> dict:
    import torch
    import torch.nn.functional as F

    from rubin.platform import device as dev
    from rubin.workloads.fused_loss import linear_cross_entropy

    torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if a.device == "cuda" else torch.float32
    h = torch.randn(a.tokens, a.dim, device=device, dtype=dtype, requires_grad=True)
    w = (0.02 * torch.randn(a.vocab, a.dim, device=device, dtype=dtype)).requires_grad_()
    t = torch.randint(0, a.vocab, (a.tokens,), device=device)
    if a.side == "plain":
        def step():
            return F.cross_entropy((h @ w.t()).float(), t)
    else:
        def step():
            return linear_cross_entropy(h, w, t, chunk=a.chunk)
    dev.synchronize(device)
    dev.reset_peak_memory(device)
    base = dev.allocated_bytes(device) if a.device == "cuda" else dev.rss_peak_bytes()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        loss.backward()
        dev.synchronize(device)
        times.append(time.perf_counter() - t0)
        h.grad = w.grad = None
    peak = dev.peak_memory_bytes(device) if a.device == "cuda" else dev.rss_peak_bytes()
    return {"side": a.side, "step_s": statistics.median(times[1:] or times), "peak_bytes": peak - base,
            "loss": float(loss)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--chunk", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--budget-s", type=float, default=300, help="stop starting new rounds after this many seconds")
    ap.add_argument("--side", choices=["plain", "fused"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.side:
        print(json.dumps(child(a)))
        return
    start, got = time.time(), {"plain": [], "fused": []}
    args = [f"--{k}={getattr(a, k)}" for k in ("tokens", "dim", "vocab", "chunk", "steps", "threads", "device")]
    for r in range(a.rounds):
        if r and time.time() - start > a.budget_s:
            break
        for side in (("plain", "fused") if r % 2 == 0 else ("fused", "plain")):
            p = subprocess.run([sys.executable, __file__, "--side", side, *args], capture_output=True, text=True)
            if p.returncode:
                raise SystemExit(f"{side} failed ({p.returncode}): {p.stderr[-2000:]}")
            row = json.loads(p.stdout.strip().splitlines()[-1])
            got[side].append(row)
            print(json.dumps({"round": r, **row}), flush=True)
    med = {s: {k: statistics.median(x[k] for x in rows) for k in ("step_s", "peak_bytes")} for s, rows in got.items()}
    spread = {s: [min(x["step_s"] for x in rows), max(x["step_s"] for x in rows)] for s, rows in got.items()}
    print(json.dumps({"summary": True, "rounds": len(got["plain"]), "median": med, "step_s_range": spread,
                      "speed_fused_over_plain": med["plain"]["step_s"] / med["fused"]["step_s"],
                      "peak_fused_over_plain": med["fused"]["peak_bytes"] / max(med["plain"]["peak_bytes"], 1),
                      "shape": {"tokens": a.tokens, "dim": a.dim, "vocab": a.vocab, "chunk": a.chunk}}))


if __name__ == "__main__":
    main()
