"""Small train configs with a launch section, for the launch tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

PLANTED = "hf_plantedSecretValue0123456789abcdefXYZ"  # shaped like a Hugging Face token
UNINTERRUPTED_STEPS = 30  # the shared uninterrupted 2-rank job (conftest.py)


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


def launch_local(cfg, *extra, env=None) -> subprocess.Popen:
    """`rubin launch local CFG --nodes 2 --gpus-per-node 1` as a real process in its own session, output merged."""
    argv = [sys.executable, "-m", "rubin", "launch", "local", str(cfg), "--nodes", "2", "--gpus-per-node", "1",
            "--set", f"launch.rdzv_port={free_port()}", *extra]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})), start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float) -> str:
    """The output of a `launch_local` process once it exits; past TIMEOUT it and all its descendants are killed."""
    from rubin.launch.local import descendants

    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for p in descendants(proc.pid) | {proc.pid}:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        out, _ = proc.communicate()
        pytest.fail(f"rubin launch local did not finish in {timeout} s:\n{out[-3000:]}")
    return out
