"""Peak memory and step time of a whole training step with the plain head vs the fused linear + cross-entropy.

GPU-sized by default: GPT-124M (and Llama 1B with --model llama1b), seq 1024, micro-batch 32, bf16
autocast, AdamW; the issue's target is a peak at least 30% lower at the same micro-batch. Each side
runs in a fresh process (alternating which goes first); peak = the allocator's max allocated over the
timed steps. Sides: the plain head, rubin's fused loss, and Liger-Kernel's (``liger``, on CUDA when it
imports). One JSON line per side and round, each side's figures (peak GB, ms/step) and the ratios to
the plain head as figure lines as soon as they are measured, then a summary line.

    python benchmarks/fused_loss_memory.py [--model gpt|llama1b] [--batch 32] [--seq 1024] [--rounds 2]
                                           [--budget-s 40] [--small]   # --small: CPU-sized, checks the script

About 40 s on an H200 for GPT-124M with 2 rounds (start-up included).
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

    from rubin.platform import device as dev
    from rubin.workloads import DataInfo, build_model
    from rubin.workloads.contract.outputs import cross_entropy
    from rubin.workloads.fused_loss import fused_lm_loss

    device = dev.pick_device(0, "cpu" if a.small else "auto")
    torch.manual_seed(0)
    vocab = 512 if a.small else 50304
    args = {"gpt": {"n_layer": 2, "n_head": 2, "n_embd": 64} if a.small else {},
            "llama1b": {"size": "tiny" if a.small else "1b"}}[a.model]
    name = "gpt" if a.model == "gpt" else "llama"
    model = build_model(name, args, DataInfo.lm(a.seq, vocab)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if device.type == "cuda" else {}))
    x = torch.randint(0, vocab, (a.batch, a.seq), device=device)
    y = torch.randint(0, vocab, (a.batch, a.seq), device=device)
    dtype = torch.bfloat16

    def step():
        with torch.autocast(device.type, dtype=dtype):
            if a.side == "plain":
                loss = cross_entropy("lm", model(x), y)
            else:
                loss = fused_lm_loss(model, x, y, impl="liger" if a.side == "liger" else "rubin")
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    step()  # the optimizer's state exists from here on, as in a long run
    dev.synchronize(device)
    dev.reset_peak_memory(device)
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        dev.synchronize(device)
        times.append(time.perf_counter() - t0)
    return {"side": a.side, "model": a.model, "ms_per_step": 1e3 * statistics.median(times),
            "peak_gb": dev.peak_memory_bytes(device) / 1e9, "loss": float(loss), "device": device.type}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["gpt", "llama1b"], default="gpt")
    ap.add_argument("--batch", type=int, default=None, help="micro-batch (default 32; 4 with --small)")
    ap.add_argument("--seq", type=int, default=None, help="sequence length (default 1024; 64 with --small)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=40, help="no new round starts after this many seconds")
    ap.add_argument("--small", action="store_true", help="CPU-sized")
    ap.add_argument("--side", choices=["plain", "fused", "liger"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.batch = a.batch or (4 if a.small else 32)
    a.seq = a.seq or (64 if a.small else 1024)
    if a.side:
        print(json.dumps(child(a)))
        return
    sides = ["plain", "fused"] + (["liger"] if liger_runs(a.small) else [])
    start, got = time.time(), {side: [] for side in sides}
    args = [f"--model={a.model}", f"--batch={a.batch}", f"--seq={a.seq}", f"--steps={a.steps}", *(["--small"] if a.small else [])]
    for r in range(a.rounds):
        if r and time.time() - start > a.budget_s:
            break
        for side in (sides if r % 2 == 0 else sides[::-1]):
            p = subprocess.run([sys.executable, __file__, "--side", side, *args], capture_output=True, text=True)
            if p.returncode:
                print(json.dumps({"round": r, "side": side, "error": p.stderr.strip().splitlines()[-1:]}), flush=True)
                continue
            row = json.loads(p.stdout.strip().splitlines()[-1])
            got[side].append(row)
            print(json.dumps({"round": r, **row}), flush=True)
            figures(got, a.model)
    if not (got["plain"] and got["fused"]):
        raise SystemExit("a side produced no result (see the error lines above)")
    med = medians(got)
    print(json.dumps({"summary": True, "model": a.model, "batch": a.batch, "seq": a.seq, "median": med,
                      "peak_saved": {s: 1 - med[s]["peak_gb"] / med["plain"]["peak_gb"] for s in med if s != "plain"},
                      "speed_over_plain": {s: med["plain"]["ms_per_step"] / med[s]["ms_per_step"] for s in med if s != "plain"},
                      "wall_s": round(time.time() - start, 1)}), flush=True)


def liger_runs(small: bool) -> bool:
    if small:
        return False
    from rubin.platform import device as dev
    from rubin.workloads.fused_loss import liger_missing

    return dev.cuda_available() and liger_missing() is None


def medians(got: dict) -> dict:
    return {s: {k: statistics.median(x[k] for x in rows) for k in ("ms_per_step", "peak_gb")} for s, rows in got.items() if rows}


def figures(got: dict, model: str) -> None:
    """The figures measured so far, printed at once (a later line of the same name supersedes it)."""
    med = medians(got)
    plain = med.get("plain")
    for side in [s for s in med if s != "plain"]:
        m = med[side]
        print(json.dumps({"figure": f"fused loss {side} {model} peak", "value": round(m["peak_gb"], 3), "unit": "GB",
                          "target": "-", "kind": "info", "ok": None, "ms_per_step": round(m["ms_per_step"], 2),
                          "rounds": len(got[side])}), flush=True)
        if plain:
            saved = 1 - m["peak_gb"] / plain["peak_gb"]
            print(json.dumps({"figure": f"fused loss {side} {model} peak saved vs plain head", "value": round(saved, 3),
                              "unit": "", "target": ">= 0.30", "kind": "gap", "ok": saved >= 0.30}), flush=True)
            print(json.dumps({"figure": f"fused loss {side} {model} speed vs plain head",
                              "value": round(plain["ms_per_step"] / m["ms_per_step"], 3), "unit": "x", "target": "-",
                              "kind": "info", "ok": None}), flush=True)


if __name__ == "__main__":
    main()
