"""Exact resume on this machine's device: a run killed with SIGKILL and resumed against an uninterrupted one.

    python benchmarks/resume_pair.py [--device cuda|cpu|auto] [--workers 0]

synthetic images with random augmentation (``data.args.augment``; not digits, whose scikit-learn the GPU
image lacks), an MLP, 16 steps, a checkpoint every 4; the
killed run dies at step 14 (``RUBIN_FAULT=crash@step=14``, a real SIGKILL) and resumes from step 12.
On CUDA the batches go through the prefetcher, which loads the next step's batch before this step's
checkpoint: with ``--workers 0`` the augmentation is drawn in the training process, the case a
prefetcher once broke. Compile is off (it would only add a cold compile per process).

Prints one JSON figure line, a correctness check: the resumed run's param digest equals the
uninterrupted one's. Exit 0 when it does, 1 when not, 2 when a run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def args_for(run_dir: Path, device: str, workers: int) -> list[str]:
    sets = [f"run.dir={run_dir}", "run.max_steps=16", "run.epochs=null", "run.deterministic=true", f"run.device={device}",
            "model.name=mlp", "model.args={hidden: 32, depth: 1}", "data.name=synthetic_images",
            "data.args={num_samples: 1408, eval_samples: 0, image_size: 8, channels: 1, augment: true}", "data.batch_size=128",
            f"data.num_workers={workers}", "checkpoint.every_steps=4", "telemetry.log_every_steps=4",
            "run.eval_every_steps=0", "distributed.compile=false"]
    return [sys.executable, "-m", "rubin", "train", "--quiet", *[a for s in sets for a in ("--set", s)]]


def run(cmd: list[str], fault: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RUBIN_FAULT"}
    if fault:
        env["RUBIN_FAULT"] = fault
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def digest(run_dir: Path) -> str | None:
    try:
        return json.loads((run_dir / "summary.json").read_text()).get("param_digest")
    except (OSError, ValueError):
        return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--workers", type=int, default=0)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="resume-pair-") as tmp:
        straight, killed = Path(tmp) / "straight", Path(tmp) / "killed"
        steps = [("straight", run(args_for(straight, a.device, a.workers)), 0),
                 ("killed", run(args_for(killed, a.device, a.workers), "crash@step=14"), -9),
                 ("resumed", run(args_for(killed, a.device, a.workers)), 0)]
        for name, p, want in steps:
            if p.returncode != want:
                last = (p.stderr.strip().splitlines() or ["no output"])[-1]
                print(f"resume_pair: the {name} run exited {p.returncode}, not {want}: {last}", file=sys.stderr)
                return 2
        same = digest(straight) is not None and digest(straight) == digest(killed)
        device = json.loads((straight / "summary.json").read_text()).get("device")
    print(json.dumps({"figure": f"resume after SIGKILL, augment, {a.workers} workers, {device}: digest equal", "value": same,
                      "unit": "", "target": "true", "kind": "check", "ok": same,
                      "seconds": round(time.perf_counter() - t0, 1)}), flush=True)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
