"""Small, fast training configs for the trainer tests (the shared base is ``faultkit.MLP``)."""

from __future__ import annotations

import json
from pathlib import Path

from faultkit import MLP, events, sets, summary

__all__ = ["events", "losses", "mlp_args", "summary"]


def mlp_args(run_dir, steps: int = 12, *extra: str) -> list[str]:
    return ["--set", f"run.dir={run_dir}", *sets([*MLP, f"run.max_steps={steps}", *extra])]


def losses(run_dir) -> list[float]:
    return [json.loads(line)["loss"] for line in open(Path(run_dir) / "metrics.jsonl")]
