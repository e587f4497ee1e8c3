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
baseline triplet, so one lucky or unlucky triplet on either side cannot decide a whole row. The draws
share one pool of seeds, so a rate is the average over that pool's triplets, not over new trainings:
check a rule change on a fresh pool (--first-seed, --variant-first-seed) before trusting it.

Runs are cached in --out (a finished run dir is reused), so a rerun only re-verifies.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from collections import Counter
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
    ap.add_argument("--variant-seeds", type=int, default=6, help="seeds trained per change (each comparison draws 3)")
    ap.add_argument("--variant-first-seed", type=int, default=100, help="first seed of the changes' runs")
    ap.add_argument("--comparisons", type=int, default=200, help="comparisons per row, each with its own two triplets")
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

    from rubin.verify.inputs import load_run

    base = [load_run(d) for d in base]  # loaded once: every comparison below reuses them
    others = {v: [load_run(d) for d in ds] for v, ds in others.items()}
    rng = random.Random(0)
    print(f"\nworkload: MLP 2x64 on digits, SGD lr 0.05, batch 64, clip 0.5, 120 steps; {len(base)} baseline seeds "
          f"({args.first_seed}-{args.first_seed + args.seeds - 1}), {args.variant_seeds} seeds per change "
          f"({vs.start}-{vs.stop - 1}); training took {train_s / 60:.1f} min")
    print(f"each row: {args.comparisons} comparisons of 3 seeds against 3, each drawing its own triplets from those pools\n")

    def judge(b_runs, new_runs):
        r = verify(b_runs, new_runs, rules=rules, method="statistical")
        failed = [c for c in r["checks"] if c["verdict"] == "fail"]
        return r["verdict"], [(c["name"], c["numbers"].get("direction") or _env_dir(c)) for c in failed]

    print(f"{'change':24} {'kind':8} {'fail':>5} {'incon.':>6} {'pass':>5}  checks that failed (direction)")
    summary = {}
    for name, (_, _, kind) in VARIANTS.items():
        results = []
        for _ in range(args.comparisons):
            if name == "base":  # benign seed pairs: 6 distinct baseline seeds, 3 against 3
                six = rng.sample(base, 6)
                results.append(judge(six[:3], six[3:]))
            else:
                results.append(judge(rng.sample(base, 3), rng.sample(others[name], 3)))
        verdicts = Counter(v for v, _ in results)
        fired = Counter(f"{c} ({d})" for _, fs in results for c, d in fs)
        label = "seed pairs" if name == "base" else name
        summary[label] = (kind if name != "base" else "benign", verdicts)
        print(f"{label:24} {summary[label][0]:8} {verdicts['fail']:>5} {verdicts['inconclusive']:>6} {verdicts['pass']:>5}  "
              + ", ".join(f"{k} {n}" for k, n in fired.most_common()), flush=True)
    n = args.comparisons
    benign = [v for kind, v in summary.values() if kind == "benign"]
    fa = sum(v["fail"] for v in benign)
    print(f"\nfalse alarms: {fa} of {n * len(benign)} benign comparisons ({100 * fa / (n * len(benign)):.1f}%; "
          f"seed pairs {summary['seed pairs'][1]['fail']}/{n}, bf16 {summary['bf16'][1]['fail']}/{n}, "
          f"2-rank DDP {summary['ddp2'][1]['fail']}/{n})")
    for label, (kind, v) in summary.items():
        if kind == "harmful":
            print(f"detected {label}: {v['fail']} of {n} ({100 * v['fail'] / n:.1f}%), inconclusive {v['inconclusive']}, "
                  f"passed {v['pass']}")
    print(f"\nrules: {'defaults' if not args.rules else args.rules}; machine: {os.cpu_count()} CPU cores; "
          f"total {(time.perf_counter() - t0) / 60:.1f} min")


def _env_dir(c):
    n = c["numbers"]
    if c["name"] == "envelope":
        return "higher loss" if n.get("above", 0) >= n.get("below", 0) else "lower loss"
    return "-"


if __name__ == "__main__":
    main()
