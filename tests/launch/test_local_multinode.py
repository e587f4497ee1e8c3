"""`rubin launch local --nodes 2 --gpus-per-node 1`: two torchrun agents on loopback, c10d rendezvous,
2 gloo ranks, as real processes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from launchhelp import free_port, write_config
from utils import invoke

from rubin.launch.local import descendants

pytestmark = pytest.mark.slow


def _launch_local(cfg, *extra, env=None) -> subprocess.Popen:
    argv = [sys.executable, "-m", "rubin", "launch", "local", str(cfg), "--nodes", "2", "--gpus-per-node", "1",
            "--set", f"launch.rdzv_port={free_port()}", *extra]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})), start_new_session=True)


def _finish(proc: subprocess.Popen, timeout: float) -> str:
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


def _losses(run_dir) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: r["loss"] for r in rows}


def _summary(run_dir) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.timeout(400)
def test_two_agents_train_like_a_single_process(tmp_path):
    single = tmp_path / "single"
    r = invoke(["train", write_config(tmp_path / "single.yaml", single, steps=15), "--quiet"])
    assert r.exit_code == 0, r.stderr

    run_dir = tmp_path / "two-nodes"
    proc = _launch_local(write_config(tmp_path / "train.yaml", run_dir, steps=15))
    out = _finish(proc, 300)
    assert proc.returncode == 0, out[-3000:]
    assert "2 torchrun agent(s)" in out and "ddp x2 on cpu" in out
    assert _summary(run_dir)["status"] == "completed"
    a, b = _losses(single), _losses(run_dir)
    assert sorted(a) == sorted(b) == list(range(1, 16))
    for step in a:
        assert abs(a[step] - b[step]) <= 1e-5, (step, a[step], b[step])


@pytest.mark.timeout(500)
def test_killed_agent_job_reforms_and_ends_with_the_uninterrupted_digest(tmp_path):
    steps = 30
    base = tmp_path / "uninterrupted"
    proc = _launch_local(write_config(tmp_path / "base.yaml", base, steps=steps))
    out = _finish(proc, 300)
    assert proc.returncode == 0, out[-3000:]

    run_dir = tmp_path / "run"
    # Both ranks pause at step 14 on their first attempt, so the kill lands mid-run whatever the load.
    proc = _launch_local(write_config(tmp_path / "train.yaml", run_dir, steps=steps), env={"RUBIN_FAULT": "pause@step=14,seconds=6"})
    first = proc.stdout.readline()
    m = re.search(r"pids (\d+) (\d+);", first)
    assert m, first
    deadline = time.monotonic() + 240
    while not ((run_dir / "metrics.jsonl").exists() and len(_losses(run_dir)) >= 12):
        assert time.monotonic() < deadline and proc.poll() is None, "the run never reached step 12"
        time.sleep(0.2)
    agent = int(m.group(2))  # node 1; node 0 hosts the rendezvous store, as a head node does
    victims = descendants(agent) | {agent}
    assert len(victims) >= 2  # the agent and its rank
    for p in victims:
        os.kill(p, signal.SIGKILL)
    out = first + _finish(proc, 400)
    assert proc.returncode == 0, out[-3000:]
    assert "node 1 died (SIGKILL); re-forming the job (1/3)" in out
    assert "resuming from step" in out
    s = _summary(run_dir)
    assert s["status"] == "completed" and s["steps"] == steps
    assert s["param_digest"] == _summary(base)["param_digest"]
