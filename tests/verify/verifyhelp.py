"""Tiny real training runs for the verify, report and qualify tests: a few seconds each."""

from __future__ import annotations

from pathlib import Path

from utils import invoke

# A 2x32 MLP on 512 synthetic vectors, 24 steps, eval every 4: learns visibly at lr 0.03.
TINY = ("run.max_steps=24", "run.epochs=null", "model.name=mlp", "model.args={hidden: 32, depth: 2}", "data.name=synthetic",
        "data.args={num_samples: 512, features: 16, num_classes: 4}", "data.batch_size=32", "telemetry.log_every_steps=1",
        "optim.warmup_steps=2", "optim.lr=0.03", "run.deterministic=true", "run.eval_every_steps=4", "checkpoint.save_final=false",
        "telemetry.nvml=false")


def args(run_dir, *extra: str) -> list[str]:
    return ["--set", f"run.dir={run_dir}", *[x for s in (*TINY, *extra) for x in ("--set", s)]]


def train(run_dir: Path, *extra: str) -> Path:
    r = invoke(["train", "--quiet", *args(run_dir, *extra)])
    assert r.exit_code == 0, r.stderr
    return run_dir
