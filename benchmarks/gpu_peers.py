"""rubin train against its peers on the same model and data: a plain nanoGPT-style loop and Lightning.

Sides (``--sides``, comma-separated):
  rubin               ``rubin train`` with its defaults (compile auto, optimizer auto, fused loss auto)
  rubin-eager         the same with distributed.compile=false
  plain               nanoGPT's choices: AdamW(fused=True) on CUDA, bf16 autocast, pinned non-blocking copies
  plain-compile       the same loop with torch.compile(model)
  lightning           Lightning's Trainer, bf16-mixed, the same AdamW (skipped when lightning is not installed)

Every side runs as a fresh process, twice per round: once for --short and once for --long optimizer
steps. Time per step = (wall(long) - wall(short)) / (long - short), measured from outside, so
start-up, imports, compile and the first steps cancel. The difference must be well above start-up
jitter (seconds per process): --long defaults to 110 steps, about 10 s of GPU work at GPT-124M size.
rubin runs without an eval split (``eval_samples: 0``), so its work grows with the step count only, as
the plain side's does. Sides and counts alternate order every round, and there are --rounds rounds (at
least 2). A side that compiles runs one untimed short process first, at the measured batch size, so
that every timed process finds a warm compile cache (a shared TORCHINDUCTOR_CACHE_DIR, --cache-dir).

Prints one JSON line per process and, after every round, each side's figure so far (median ms/step and
its range, tokens/s, MFU against the GPU's dense bf16 peak, peak memory) and its ratio against ``plain``
as figure lines, so a run cut short still leaves its figures; then a summary line.

    python benchmarks/gpu_peers.py                                  # H200: GPT-124M, seq 1024, micro-batch 32
    python benchmarks/gpu_peers.py --small --sides rubin,plain      # CPU-sized
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SIDES = ("rubin", "rubin-eager", "plain", "plain-compile", "lightning")


def shape(a) -> dict:
    if a.small:
        return {"args": {"n_layer": 2, "n_head": 2, "n_embd": 64}, "seq": 64, "vocab": 512, "batch": 8}
    return {"args": {"n_layer": 12, "n_head": 12, "n_embd": 768}, "seq": 1024, "vocab": 50304, "batch": 32}


# ---- child processes: one side, one step count ----

def _model_and_data(a, device):
    import torch

    from rubin.workloads import DataInfo, build_model

    s = shape(a)
    torch.manual_seed(0)
    model = build_model("gpt", s["args"], DataInfo.lm(s["seq"], s["vocab"])).to(device)
    g = torch.Generator().manual_seed(0)
    # a small pool of random token batches in pinned memory, reused: the loader is never the bottleneck
    pool = [torch.randint(0, s["vocab"], (s["batch"], s["seq"] + 1), generator=g) for _ in range(8)]
    if device.type == "cuda":
        pool = [b.pin_memory() for b in pool]
    return model, pool, s


def plain_child(a, steps: int) -> dict:
    import torch
    import torch.nn.functional as F

    from rubin.platform import device as dev

    device = dev.pick_device(0, "auto")
    model, pool, s = _model_and_data(a, device)
    cuda = device.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=cuda)
    run = torch.compile(model) if a.side == "plain-compile" else model
    dtype = torch.bfloat16 if cuda else torch.float32
    for i in range(steps):
        b = pool[i % len(pool)].to(device, non_blocking=True)
        x, y = b[:, :-1], b[:, 1:]
        with torch.autocast(device.type, dtype=dtype, enabled=cuda):
            logits = run(x)
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (i + 1) % 10 == 0:
            loss.item()
    dev.synchronize(device)
    return {"peak_gb": dev.peak_memory_bytes(device) / 1e9 if cuda else None, "loss": float(loss)}


def lightning_child(a, steps: int) -> dict:
    import lightning as L
    import torch
    import torch.nn.functional as F

    from rubin.platform import device as dev

    device = dev.pick_device(0, "auto")
    model, pool, s = _model_and_data(a, torch.device("cpu"))
    cuda = device.type == "cuda"

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = model

        def training_step(self, batch, _):
            x, y = batch[0][:, :-1], batch[0][:, 1:]
            logits = self.model(x)
            return F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=cuda)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.cat(pool * (steps // len(pool) + 1))),
                                       batch_size=s["batch"], pin_memory=cuda)
    trainer = L.Trainer(max_steps=steps, precision="bf16-mixed" if cuda else "32-true", accelerator="auto", devices=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        gradient_clip_val=1.0)
    trainer.fit(Module(), data)
    return {"peak_gb": dev.peak_memory_bytes(device) / 1e9 if cuda else None}


def rubin_cmd(a, steps: int, run_dir: str) -> list[str]:
    s = shape(a)
    args = "{" + ", ".join(f"{k}: {v}" for k, v in s["args"].items()) + "}"
    sets = {"model.name": "gpt", "model.args": args, "data.name": "synthetic_tokens",
            "data.args": f"{{num_samples: {max(256, steps * s['batch'])}, eval_samples: 0, seq_len: {s['seq']}, "
                         f"vocab_size: {s['vocab']}}}",
            "data.batch_size": s["batch"], "run.max_steps": steps, "run.epochs": "null", "run.eval_every_steps": 0,
            "telemetry.log_every_steps": 10, "checkpoint.save_final": "false", "run.dir": run_dir,
            "precision": "fp32" if a.small else "bf16"}
    if a.side == "rubin-eager":
        sets["distributed.compile"] = "false"
    sets.update(item.split("=", 1) for item in a.rubin_set or [])
    return [sys.executable, "-m", "rubin", "train", "--quiet", "--json", "--no-resume",
            *[x for k, v in sets.items() for x in ("--set", f"{k}={v}")]]


# ---- the parent: rounds of fresh processes ----

def run_once(a, side: str, steps: int, cache: str) -> dict:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, OMP_NUM_THREADS=str(a.threads))
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
        if side.startswith("rubin"):
            cmd = rubin_cmd(argparse.Namespace(**{**vars(a), "side": side}), steps, os.path.join(tmp, "run"))
        else:
            cmd = [sys.executable, __file__, "--child", side, "--child-steps", str(steps), *(["--small"] if a.small else [])]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
    if p.returncode:
        last = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return {"side": side, "steps": steps, "error": f"exit {p.returncode}: {last}"[:300]}
    doc = {}
    for line in reversed(p.stdout.strip().splitlines()):
        try:
            doc = json.loads(line)
            break
        except ValueError:
            continue
    peak = doc.get("peak_gb")
    if peak is None and doc.get("peak_mem_bytes"):  # rubin's summary
        peak = doc["peak_mem_bytes"] / 1e9 if doc.get("device", "").startswith("cuda") else None
    return {"side": side, "steps": steps, "wall_s": wall, "peak_gb": peak,
            "compile_s": (doc.get("compile") or {}).get("compile_s")}


def available(side: str) -> str | None:
    if side == "lightning":
        try:
            import lightning  # noqa: F401
        except ImportError:
            return "lightning is not installed (pip install lightning)"
    return None


def peak_tflops(small: bool) -> float | None:
    if small:
        return None
    from rubin.platform import device as dev
    from rubin.platform import specs

    return specs.peak_tflops(specs.match_device(dev.pick_device(0, "auto")), "bf16")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sides", default="rubin,plain", help=f"comma-separated, from {', '.join(SIDES)}")
    ap.add_argument("--short", type=int, default=None, help="steps of the short process (default 10; 10 with --small)")
    ap.add_argument("--long", type=int, default=None, help="steps of the long process (default 110; 160 with --small: CPU "
                    "start-up noise needs the longer span)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=None, help="no new round starts after this (2 rounds still run)")
    ap.add_argument("--cache-dir", default=None, help="TORCHINDUCTOR_CACHE_DIR shared by every process (default: a new "
                    "temporary one); one a compiled run of the same shape filled makes the warm-up short")
    ap.add_argument("--rubin-set", action="append", metavar="KEY=VALUE", help="a --set item for the rubin sides "
                    "(repeatable), e.g. model.fused_loss=true")
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of each process (CPU)")
    ap.add_argument("--small", action="store_true", help="CPU-sized: a 2-layer GPT, seq 64, micro-batch 8, fp32")
    ap.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    ap.add_argument("--child-steps", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        a.side = a.child
        fn = lightning_child if a.child == "lightning" else plain_child
        print(json.dumps(fn(a, a.child_steps)))
        return
    if a.rounds < 2 and not a.small:  # CPU-sized (--small) may run one round: a check of the script, not a figure
        ap.error(f"--rounds={a.rounds}: at least 2 (alternating order needs it to mean anything)")
    short, long_ = a.short or 10, a.long or (160 if a.small else 110)
    sides = [s.strip() for s in a.sides.split(",") if s.strip()]
    bad = [s for s in sides if s not in SIDES]
    if bad:
        ap.error(f"--sides: unknown {', '.join(bad)}; choose from {', '.join(SIDES)}")
    for s in list(sides):
        why = available(s)
        if why:
            print(json.dumps({"side": s, "skipped": why}), flush=True)
            sides.remove(s)
    s = shape(a)
    start = time.time()
    cache = a.cache_dir or tempfile.mkdtemp(prefix="peers-inductor-")
    for side in sides:  # warm the compile cache: the timed processes all find it warm
        if side in ("rubin", "plain-compile") and not a.small:
            print(json.dumps({"warmup": run_once(a, side, 2, cache)}), flush=True)
    per_step: dict[str, list[float]] = {x: [] for x in sides}
    peaks: dict[str, list[float]] = {x: [] for x in sides}
    flops, peak = flops_per_step(s), peak_tflops(a.small)
    table: dict[str, dict] = {}
    for r in range(a.rounds):
        if r >= 2 and a.budget_s is not None and time.time() - start > a.budget_s:
            break
        order = sides if r % 2 == 0 else sides[::-1]
        counts = (short, long_) if r % 2 == 0 else (long_, short)
        for side in order:
            got = {}
            for n in counts:
                row = run_once(a, side, n, cache)
                print(json.dumps({"round": r, **row}), flush=True)
                got[n] = row
            if all("wall_s" in got[n] for n in counts):
                per_step[side].append((got[long_]["wall_s"] - got[short]["wall_s"]) / (long_ - short))
                if got[long_].get("peak_gb") is not None:
                    peaks[side].append(got[long_]["peak_gb"])
        table = side_table(per_step, peaks, s["batch"] * s["seq"], flops, peak)
        for side, t in table.items():  # after every round: a run cut short keeps what it measured
            if "ms_per_step" in t:
                print(json.dumps({"figure": f"peers {side} ms/step", "value": round(t["ms_per_step"], 2), "unit": "ms",
                                  "target": "-", "kind": "info", "ok": None, "rounds": t["n"], **t}), flush=True)
        base = table.get("plain", {}).get("ms_per_step")
        for side, t in table.items():
            if side != "plain" and base and t.get("ms_per_step"):
                ratio = base / t["ms_per_step"]
                print(json.dumps({"figure": f"peers {side} speed vs plain", "value": round(ratio, 3), "unit": "x",
                                  "target": ">= 1.0", "kind": "gap", "ok": ratio >= 1.0, "rounds": t["n"]}), flush=True)
    base = table.get("plain", {}).get("ms_per_step")
    ratios = {side: base / t["ms_per_step"] for side, t in table.items() if base and t.get("ms_per_step")}
    print(json.dumps({"summary": True, "sides": table, "speed_vs_plain": ratios, "shape": s, "short": short, "long": long_,
                      "wall_s": round(time.time() - start, 1), "peak_tflops": peak}), flush=True)


def flops_per_step(s: dict) -> float:
    import torch

    from rubin.workloads.models.gpt import GPT, GPTConfig

    cfg = GPTConfig(**s["args"], vocab_size=s["vocab"], block_size=s["seq"])
    with torch.device("meta"):
        return GPT(cfg, seq_len=s["seq"]).flops_per_sample() * s["batch"]


def side_table(per_step: dict, peaks: dict, tokens: int, flops: float, peak: float | None) -> dict:
    table = {}
    for side, xs in per_step.items():
        if not xs:
            table[side] = {"error": "no complete round"}
            continue
        m = statistics.median(xs)
        table[side] = {"ms_per_step": 1e3 * m, "ms_range": [1e3 * min(xs), 1e3 * max(xs)], "n": len(xs),
                       "tokens_per_s": tokens / m if m > 0 else None,
                       "mfu": flops / m / (peak * 1e12) if peak and m > 0 else None,
                       "peak_gb": statistics.median(peaks[side]) if peaks[side] else None}
    return table


if __name__ == "__main__":
    main()
