"""What ``run.deterministic: true`` costs: whole ``rubin train`` processes with it off and on, side by side.

Each round runs both sides as fresh processes (alternating which goes first) on the same config,
timed with the wall clock from outside, and prints the ratio on/off per round and the median. Also
prints the time ``determinism.pin`` itself takes in a fresh process.

    python benchmarks/determinism_cost.py [--rounds 5] [--steps 200] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CFG = ["run.epochs=null", "model.name=mlp", "model.args={hidden: 768, depth: 4}", "data.name=synthetic",
       "data.args={num_samples: 2048, features: 64, num_classes: 10}", "data.batch_size=64", "data.num_workers=0",
       "telemetry.log_every_steps=50", "checkpoint.every_steps=null", "checkpoint.save_final=false"]


def _run(run_dir: Path, steps: int, deterministic: bool, env: dict) -> float:
    sets = [a for item in [*CFG, f"run.max_steps={steps}", f"run.deterministic={str(deterministic).lower()}",
                           f"run.dir={run_dir}"] for a in ("--set", item)]
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rubin", "train", "--quiet", *sets], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    pin_s = subprocess.run([sys.executable, "-c", "import time, torch\nfrom rubin.train.determinism import pin\n"
                            "t = time.perf_counter(); pin(torch.device('cpu')); print(time.perf_counter() - t)"],
                           env=env, check=True, capture_output=True, text=True).stdout.strip()
    print(f"pin() in a fresh process: {float(pin_s) * 1000:.0f} ms")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = [False, True] if r % 2 == 0 else [True, False]
            t = {det: _run(Path(tmp) / f"r{r}-{det}", args.steps, det, env) for det in order}
            ratios.append(t[True] / t[False])
            print(f"round {r + 1}: off {t[False]:.2f} s  on {t[True]:.2f} s  on/off {ratios[-1]:.3f}", flush=True)
    print(f"deterministic on/off, whole process, {args.steps} steps, {args.threads} threads: "
          f"median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}, {args.rounds} rounds)")


if __name__ == "__main__":
    main()
