"""Small train configs with a launch section, for the launch tests."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

PLANTED = "hf_plantedSecretValue0123456789abcdefXYZ"  # shaped like a Hugging Face token


def write_config(path: Path, run_dir, *, steps: int = 12, launch: dict | None = None, **sections) -> Path:
    """A tiny deterministic MLP config (fast on CPU) with a launch section."""
    cfg = {
        "run": {"name": "launch-test", "dir": str(run_dir), "max_steps": steps, "deterministic": True},
        "model": {"name": "mlp", "args": {"hidden": 32, "depth": 2}},
        "data": {"name": "synthetic", "args": {"num_samples": 512, "features": 16, "num_classes": 4}, "batch_size": 32},
        "optim": {"warmup_steps": 2},
        "telemetry": {"log_every_steps": 1},
        "checkpoint": {"every_steps": 5},
        "launch": {"accelerator": "cpu", "python": sys.executable, **(launch or {})},
    }
    for k, v in sections.items():
        cfg.setdefault(k, {}).update(v)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def every_file(*roots) -> list[Path]:
    out = []
    for root in roots:
        root = Path(root)
        out += [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
    return out


def free_port() -> int:
    """A TCP port free right now on 127.0.0.1 (for a rendezvous)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
