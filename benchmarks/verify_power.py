"""How often does ``rubin verify`` cry wolf, and does it catch real migration bugs?

Trains real CPU runs of one small workload, then runs ``verify`` (default rules, statistical method,
3 seeds a side) on:
  benign pairs   3 seeds against 3 other seeds of the same config; fp32 -> bf16 autocast; 1 process -> 2 DDP ranks
  harmful        learning rate 2x; global batch 64 -> 16 with the same LR; 30% of train labels shuffled;
                 gradient clipping off; (and learning rate 10x too low, for reference)
and prints the false-alarm rate and the detection rate per change, with the direction verify reported.

Workload: MLP (2 x 64) on scikit-learn's digits (1,437 train / 360 eval images), SGD momentum 0.9,
lr 0.05, batch 64, grad clip 0.5 (active: grad norms reach ~1.6), 120 steps, eval every 10 steps.
SGD rather than AdamW because Adam normalizes the gradient, which hides a clipping bug.

    python benchmarks/verify_power.py [--out DIR] [--seeds 12] [--first-seed 0] [--variant-seeds 6] [--variant-first-seed 100]

Each change is trained on --variant-seeds seeds; every comparison draws its own 3 of them and its own
baseline triplet, so one lucky or unlucky triplet on either side cannot decide a whole row.

Runs are cached in --out (a finished run dir is reused), so a rerun only re-verifies.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path

BASE = {
    "model.name": "mlp", "model.args": "{hidden: 64, depth: 2}", "data.name": "digits", "data.batch_size": "64",
    "run.max_steps": "120", "run.epochs": "null", "run.eval_every_steps": "10", "optim.name": "sgd", "optim.lr": "0.05",
    "optim.warmup_steps": "5", "optim.weight_decay": "0", "optim.grad_clip": "0.5", "telemetry.log_every_steps": "2",
    "telemetry.nvml": "false", "checkpoint.save_final": "false", "run.deterministic": "true",
}
VARIANTS = {  # name -> (overrides, ranks, kind)
    "base": ({}, 1, "baseline"),
    "bf16": ({"precision": "bf16"}, 1, "benign"),
    "ddp2": ({}, 2, "benign"),
    "lr_2x": ({"optim.lr": "0.1"}, 1, "harmful"),
    "batch_no_lr_rescale": ({"data.batch_size": "16"}, 1, "harmful"),
    "labels_30pct_shuffled": ({"data.args": "{label_noise: 0.3}"}, 1, "harmful"),
    "grad_clip_off": ({"optim.grad_clip": "null"}, 1, "harmful"),
    "lr_10x_low": ({"optim.lr": "0.005"}, 1, "harmful"),
}


def train(out: Path, variant: str, seed: int) -> Path:
    overrides, ranks, _ = VARIANTS[variant]
    run_dir = out / f"{variant}-s{seed}"
    if (run_dir / "summary.json").exists():
        return run_dir
    sets = {**BASE, **overrides, "run.dir": str(run_dir), "run.seed": str(seed)}
    args = ["train", "--quiet", "--force", *[x for k, v in sets.items() for x in ("--set", f"{k}={v}")]]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if ranks == 1:
        cmd = [sys.executable, "-m", "rubin", *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={ranks}",
               "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0", "-m", "rubin", *args]
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"training {run_dir} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    print(f"  trained {run_dir.name} in {time.perf_counter() - t:.1f} s", flush=True)
    return run_dir


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/verify-power", help="where the runs go (reused when rerun)")
    ap.add_argument("--seeds", type=int, default=12, help="baseline seeds (benign pairs are drawn from them)")
    ap.add_argument("--first-seed", type=int, default=0, help="first baseline seed: a fresh range checks rules tuned on another")
    ap.add_argument("--pairs", type=int, default=12, help="benign seed pairs (3 against 3 disjoint seeds)")
    ap.add_argument("--variant-seeds", type=int, default=6, help="seeds trained per change (each comparison draws 3)")
    ap.add_argument("--variant-first-seed", type=int, default=100, help="first seed of the changes' runs")
    ap.add_argument("--comparisons", type=int, default=6, help="comparisons per change, each with its own two triplets")
    ap.add_argument("--rules", help="rules file to measure instead of the defaults")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from rubin.verify.core import verify
    from rubin.verify.rules import load_rules

    rules = load_rules(args.rules)
    t0 = time.perf_counter()
    base = [train(out, "base", s) for s in range(args.first_seed, args.first_seed + args.seeds)]
    vs = range(args.variant_first_seed, args.variant_first_seed + args.variant_seeds)
    others = {v: [train(out, v, s) for s in vs] for v in VARIANTS if v != "base"}
    train_s = time.perf_counter() - t0

    rng = random.Random(0)
    triplets = [tuple(rng.sample(range(args.seeds), 6)) for _ in range(args.pairs)]
    print(f"\nworkload: MLP 2x64 on digits, SGD lr 0.05, batch 64, clip 0.5, 120 steps; {len(base)} baseline seeds, "
          f"{args.variant_seeds} seeds per change; training took {train_s / 60:.1f} min\n")
    rows = []

    def judge(name, kind, b_idx, new_dirs):
        r = verify([base[i] for i in b_idx], new_dirs, rules=rules, method="statistical")
        failed = [c for c in r["checks"] if c["verdict"] == "fail"]
        direction = "; ".join(f"{c['name']}: {c['numbers'].get('direction') or _env_dir(c)}" for c in failed)
        rows.append((name, kind, r["verdict"], direction, r["reason"]))
        return r["verdict"]

    benign_flags = []
    for t in triplets:
        v = judge("seeds", "benign", t[:3], [base[i] for i in t[3:]])
        benign_flags.append(v == "fail")
    base_triplets = [tuple(rng.sample(range(args.seeds), 3)) for _ in range(args.comparisons)]
    new_triplets = [rng.sample(range(args.variant_seeds), 3) for _ in range(args.comparisons)]
    for name, (_, _, kind) in VARIANTS.items():
        if name == "base":
            continue
        verdicts = [judge(name, kind, bt, [others[name][i] for i in nt]) for bt, nt in zip(base_triplets, new_triplets)]
        if kind == "benign":
            benign_flags += [v == "fail" for v in verdicts]
    print(f"{'change':24} {'kind':8} {'verdict':13} failed checks (direction)")
    for name, kind, verdict, direction, _ in rows:
        print(f"{name:24} {kind:8} {verdict:13} {direction}")
    print(f"\nfalse alarms: {sum(benign_flags)} of {len(benign_flags)} benign comparisons "
          f"({len(triplets)} seed pairs + bf16 and 2-rank DDP against {len(base_triplets)} baseline triplets each)")
    for name, (_, _, kind) in VARIANTS.items():
        if kind == "harmful":
            got = [r for r in rows if r[0] == name]
            hit = sum(r[2] == "fail" for r in got)
            print(f"detected {name}: {hit} of {len(got)} (3 seeds a side, drawn from new seeds {vs.start}-{vs.stop - 1} and "
                  f"baseline seeds {args.first_seed}-{args.first_seed + args.seeds - 1})")
    print(f"\nrules: {'defaults' if not args.rules else args.rules}; machine: {os.cpu_count()} CPU cores; "
          f"total {(time.perf_counter() - t0) / 60:.1f} min")


def _env_dir(c):
    n = c["numbers"]
    if c["name"] == "envelope":
        return "higher loss" if n.get("above", 0) >= n.get("below", 0) else "lower loss"
    return "-"


if __name__ == "__main__":
    main()
