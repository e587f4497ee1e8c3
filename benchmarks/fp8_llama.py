"""fp8 (torchao float8 training) against bf16 autocast on the Llama 1B shape: tokens/s, side by side.

Both sides: the same Llama (Llama-3.2-1B body, vocab from --vocab), AdamW fused, bf16 autocast, the
fused linear + cross-entropy, each block compiled (float8 gains only when its casts are fused, so
both sides compile, or neither with --no-compile). Each side runs in a fresh process, alternating;
time per step is the median of the timed steps after --warmup compiling ones. One JSON line per
side and round, then a summary with fp8/bf16 (the issue's target: >= 1.25 on an H200).

    python benchmarks/fp8_llama.py [--batch 4] [--seq 2048] [--steps 12] [--rounds 1] [--budget-s 70]
    python benchmarks/fp8_llama.py --small --no-compile   # CPU-sized: the bf16 side only (fp8 needs sm89+)

About 70 s on an H200 with one round.
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
    from rubin.train.speed import fp8
    from rubin.train.speed.compile import compile_blocks
    from rubin.workloads import DataInfo, build_model, flops_per_sample
    from rubin.workloads.fused_loss import fused_lm_loss

    device = dev.pick_device(0, "cpu" if a.small else "auto")
    torch.manual_seed(0)
    model = build_model("llama", {"size": "tiny" if a.small else "1b"}, DataInfo.lm(a.seq, a.vocab)).to(device)
    say = lambda line: print(f"warning: {line}", file=sys.stderr)  # noqa: E731
    converted = fp8.convert(model, device, micro_batch=a.batch, tokens_per_sample=a.seq, warn=say) if a.side == "fp8" else []
    if a.compile:
        compile_blocks(model.model_blocks())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if device.type == "cuda" else {}))
    x = torch.randint(0, a.vocab, (a.batch, a.seq), device=device)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), device=device)
    times, losses = [], []
    t_first = time.perf_counter()
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = fused_lm_loss(model, x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dev.synchronize(device)
        if i == a.warmup - 1:
            warm_s = time.perf_counter() - t_first
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
        losses.append(float(loss))
    step_s = statistics.median(times)
    tokens_s = a.batch * a.seq / step_s
    return {"side": a.side, "ms_per_step": 1e3 * step_s, "tokens_per_s": tokens_s,
            "tflops_per_s": flops_per_sample(model) * a.batch / step_s / 1e12, "warmup_s": warm_s,
            "converted_linears": len(converted), "peak_gb": dev.peak_memory_bytes(device) / 1e9,
            "loss_first": losses[0], "loss_last": losses[-1], "device": device.type}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=None, help="micro-batch (default 4; 2 with --small)")
    ap.add_argument("--seq", type=int, default=None, help="default 2048; 64 with --small")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--budget-s", type=float, default=70, help="no new round starts after this many seconds")
    ap.add_argument("--no-compile", dest="compile", action="store_false")
    ap.add_argument("--small", action="store_true", help="CPU-sized (bf16 only: fp8 is refused on a CPU)")
    ap.add_argument("--side", choices=["bf16", "fp8"], help="run one side in this process (its JSON line only)")
    a = ap.parse_args()
    a.batch = a.batch or (2 if a.small else 4)
    a.seq = a.seq or (64 if a.small else 2048)
    if a.side:
        print(json.dumps(child(a)))
        return
    sides = ("bf16",) if a.small else ("bf16", "fp8")
    start, got = time.time(), {s: [] for s in sides}
    args = [f"--batch={a.batch}", f"--seq={a.seq}", f"--vocab={a.vocab}", f"--warmup={a.warmup}", f"--steps={a.steps}",
            *(["--small"] if a.small else []), *([] if a.compile else ["--no-compile"])]
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
            print(json.dumps({"figure": f"fp8 llama {side} tokens/s", "value": round(row["tokens_per_s"]), "unit": "tok/s",
                              "target": "-", "kind": "info", "ok": None, "converted_linears": row["converted_linears"],
                              "warmup_s": round(row["warmup_s"], 1)}), flush=True)
            if got.get("fp8") and got.get("bf16"):  # as soon as both sides have a figure
                ratio = statistics.median(x["tokens_per_s"] for x in got["fp8"]) / \
                    statistics.median(x["tokens_per_s"] for x in got["bf16"])
                print(json.dumps({"figure": "fp8 llama fp8/bf16 tokens/s", "value": round(ratio, 3), "unit": "x",
                                  "target": ">= 1.25", "kind": "gap", "ok": ratio >= 1.25}), flush=True)
    med = {s: statistics.median(x["tokens_per_s"] for x in rows) for s, rows in got.items() if rows}
    summary = {"summary": True, "batch": a.batch, "seq": a.seq, "tokens_per_s": med, "wall_s": round(time.time() - start, 1)}
    if "fp8" in med and "bf16" in med:
        summary["fp8_over_bf16"] = med["fp8"] / med["bf16"]
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
