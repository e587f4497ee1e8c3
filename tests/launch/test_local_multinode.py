"""`rubin launch local --nodes 2 --gpus-per-node 1`: two torchrun agents on loopback, c10d rendezvous,
2 gloo ranks, as real processes."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest
from launchhelp import UNINTERRUPTED_STEPS, finish, launch_local, write_config
from utils import invoke

from rubin.launch.local import descendants

pytestmark = pytest.mark.slow
STEPS = UNINTERRUPTED_STEPS  # the steps of the shared uninterrupted job (conftest.py)


def _losses(run_dir) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: r["loss"] for r in rows}


def _summary(run_dir) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.timeout(400)
def test_two_agents_train_like_a_single_process(tmp_path, uninterrupted_two_agents):
    single = tmp_path / "single"
    r = invoke(["train", write_config(tmp_path / "single.yaml", single, steps=STEPS), "--quiet"])
    assert r.exit_code == 0, r.stderr

    run_dir, out, code = uninterrupted_two_agents
    assert code == 0, out[-3000:]
    assert "2 torchrun agent(s)" in out and "ddp x2 on cpu" in out
    assert _summary(run_dir)["status"] == "completed"
    a, b = _losses(single), _losses(run_dir)
    assert sorted(a) == sorted(b) == list(range(1, STEPS + 1))
    for step in a:
        assert abs(a[step] - b[step]) <= 1e-5, (step, a[step], b[step])


@pytest.mark.timeout(500)
def test_killed_agent_job_reforms_and_ends_with_the_uninterrupted_digest(tmp_path, uninterrupted_two_agents):
    steps = STEPS
    base, out, code = uninterrupted_two_agents
    assert code == 0, out[-3000:]

    run_dir = tmp_path / "run"
    # Both ranks pause at step 14 on their first attempt, so the kill lands mid-run whatever the load.
    proc = launch_local(write_config(tmp_path / "train.yaml", run_dir, steps=steps), env={"RUBIN_FAULT": "pause@step=14,seconds=6"})
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
    out = first + finish(proc, 400)
    assert proc.returncode == 0, out[-3000:]
    assert "node 1 died (SIGKILL); re-forming the job (1/3)" in out
    assert "resuming from step" in out
    s = _summary(run_dir)
    assert s["status"] == "completed" and s["steps"] == steps
    assert s["param_digest"] == _summary(base)["param_digest"]
