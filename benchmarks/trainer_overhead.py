"""rubin train against a minimal hand-written PyTorch loop: same model, data, batch and optimizer.

Both run side by side in this process, alternating trials, and the script prints the
throughput ratio rubin / plain (median over trials). Telemetry stays on in rubin (JSONL
metrics every 10 steps, the per-step NaN/preemption agreement, heartbeats); checkpoints are off
so the comparison is of the loop itself.

    python benchmarks/trainer_overhead.py [--steps 300] [--trials 5] [--model vit|mlp]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import torch

from rubin import workloads
from rubin.train.config import load_config
from rubin.train.optim import build_optimizer, build_scheduler
from rubin.train.trainer import train

WARMUP = 20


def configs(model: str, steps: int, run_dir: str):
    if model == "vit":
        base = ["model.name=vit", "model.args={patch_size: 2, dim: 64, depth: 4, heads: 4, mlp_ratio: 2.0}", "data.name=digits"]
    else:
        base = ["model.name=mlp", "model.args={hidden: 512, depth: 3}", "data.name=synthetic", "data.args={num_samples: 32768, features: 256}"]
    return load_config(None, base + [
        f"run.max_steps={steps}", "run.epochs=null", f"run.dir={run_dir}", "data.batch_size=64",
        "telemetry.log_every_steps=10", "checkpoint.every_steps=null", "checkpoint.save_final=false",
        "optim.warmup_steps=10", "run.eval_every_steps=0",
    ])


def rubin_rate(cfg) -> float:
    """samples/s over the logged intervals after warm-up, from rubin's own metrics.jsonl."""
    train(cfg, quiet=True, resume=False)
    rows = [json.loads(l) for l in open(f"{cfg.run.dir}/metrics.jsonl")]
    rows = [r for r in rows if r["step"] > WARMUP]
    steps = sum(10 for _ in rows)
    secs = sum(r["time"]["step_s"] * 10 for r in rows)
    return steps * cfg.data.batch_size / secs


def plain_rate(cfg) -> float:
    """The loop people copy: DataLoader(shuffle), autocast-free fp32, clip, AdamW, cosine."""
    torch.manual_seed(cfg.run.seed)
    train_ds, _, info = workloads.build_data(cfg.data.name, None, dict(cfg.data.args), seed=0, cache_dir=None)
    model = workloads.build_model(cfg.model.name, dict(cfg.model.args), info)
    opt = build_optimizer(model, cfg.optim)
    sched = build_scheduler(opt, cfg.optim, cfg.run.max_steps)
    loader = torch.utils.data.DataLoader(train_ds, batch_size=cfg.data.batch_size, shuffle=True, drop_last=True)
    step, t0 = 0, None
    while step < cfg.run.max_steps:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            sched.step()
            step += 1
            if step == WARMUP:
                t0 = time.perf_counter()
            if step % 10 == 0:
                loss.item()  # a plain loop prints its loss now and then too
            if step >= cfg.run.max_steps:
                break
    return (cfg.run.max_steps - WARMUP) * cfg.data.batch_size / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--model", choices=["vit", "mlp"], default="vit")
    a = ap.parse_args()
    ours, plain = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.trials):
            plain.append(plain_rate(configs(a.model, a.steps, f"{tmp}/p{i}")))
            ours.append(rubin_rate(configs(a.model, a.steps, f"{tmp}/r{i}")))
            print(f"trial {i}: plain {plain[-1]:8.1f}  rubin {ours[-1]:8.1f} samples/s  ratio {ours[-1] / plain[-1]:.3f}", flush=True)
    ratios = [o / p for o, p in zip(ours, plain)]
    print(f"model={a.model} steps={a.steps} trials={a.trials} threads={torch.get_num_threads()}")
    print(f"plain  samples/s median {statistics.median(plain):.1f} (min {min(plain):.1f}, max {max(plain):.1f})")
    print(f"rubin  samples/s median {statistics.median(ours):.1f} (min {min(ours):.1f}, max {max(ours):.1f})")
    print(f"ratio rubin/plain median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}); target >= 0.97")


if __name__ == "__main__":
    main()
