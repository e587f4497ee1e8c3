"""Test helpers: run the CLI in-process and real subprocesses."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str


def invoke(args: list[str]) -> Result:
    """Run ``rubin ARGS`` in this process and capture what it prints."""
    from rubin.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return Result(code, out.getvalue(), err.getvalue())


def run_rubin(args: list[str], *, env: dict | None = None, timeout: float = 300, cwd=None) -> subprocess.CompletedProcess:
    """Run ``python -m rubin ARGS`` as a real process."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "rubin", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=cwd,
    )


def torchrun_cmd(nproc: int, args: list[str], *, max_restarts: int = 0) -> list[str]:
    """A torchrun command line that runs ``python -m rubin ARGS`` on NPROC local gloo ranks."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        f"--nproc-per-node={nproc}",
        f"--max-restarts={max_restarts}",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=localhost:0",
        "-m",
        "rubin",
        *map(str, args),
    ]


# gloo's TCP transport can refuse the very first peer connection when both cores are saturated
# (its connect retries are few and fast). That is a start-up race of the transport, not of rubin:
# a launch that fails with exactly this message, before any step ran, is launched once more.
_GLOO_STARTUP_RACE = "Gloo connectFullMesh failed"


def run_torchrun(nproc: int, args: list[str], *, env: dict | None = None, max_restarts: int = 0, timeout: float = 240):
    full = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    for attempt in range(2):
        p = subprocess.run(torchrun_cmd(nproc, args, max_restarts=max_restarts), capture_output=True, text=True,
                           timeout=timeout, env=full)
        if p.returncode == 0 or _GLOO_STARTUP_RACE not in p.stderr or attempt == 1:
            return p
    return p
