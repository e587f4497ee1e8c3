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


# gloo's TCP transport can refuse the first peer connection while the group forms when both cores
# are saturated (its connect retries are few and fast). That is a race in the transport, not in
# rubin: a launch that fails with exactly this message, or never starts, is launched again, up to
# three times in all.
_GLOO_STARTUP_RACE = "Gloo connectFullMesh failed"


def run_torchrun(nproc: int, args: list[str], *, env: dict | None = None, max_restarts: int = 0, timeout: float = 120):
    """torchrun in its own session; on a timeout the whole group (agent and workers) is killed, no orphans."""
    import signal

    full = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    for attempt in range(3):
        proc = subprocess.Popen(torchrun_cmd(nproc, args, max_restarts=max_restarts), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=full, start_new_session=True)
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:  # the same race can leave a re-formed group waiting forever
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            err += f"\n[torchrun killed after {timeout} s]"
        p = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        if p.returncode == 0 or not (timed_out or _GLOO_STARTUP_RACE in p.stderr):
            return p
    return p
