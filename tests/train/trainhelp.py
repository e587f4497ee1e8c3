"""Small, fast training configs for the trainer tests."""

from __future__ import annotations

import json
from pathlib import Path


def mlp_args(run_dir, steps: int = 12, *extra: str) -> list[str]:
    return [
        "--set", f"run.dir={run_dir}",
        "--set", f"run.max_steps={steps}", "--set", "run.epochs=null",
        "--set", "model.name=mlp", "--set", "model.args={hidden: 32, depth: 2}",
        "--set", "data.name=synthetic", "--set", "data.args={num_samples: 512, features: 16, num_classes: 4}",
        "--set", "data.batch_size=32", "--set", "telemetry.log_every_steps=1",
        "--set", "optim.warmup_steps=2", "--set", "run.deterministic=true",
        *[a for e in extra for a in ("--set", e)],
    ]


def losses(run_dir) -> list[float]:
    return [json.loads(l)["loss"] for l in open(Path(run_dir) / "metrics.jsonl")]


def summary(run_dir) -> dict:
    return json.loads((Path(run_dir) / "summary.json").read_text())


def events(run_dir) -> list[dict]:
    p = Path(run_dir) / "events.jsonl"
    return [json.loads(l) for l in open(p)] if p.exists() else []
