"""`rubin launch slurm` on a real Slurm (scripts/local-slurm.sh starts a one-host cluster).

Skipped, with the reason, when `sinfo` does not answer. Jobs are 2-rank CPU jobs (torchrun with 2
gloo ranks on one node) with this test's python and a run dir under the test's tmp path.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time

import pytest
from launchhelp import UNINTERRUPTED_STEPS, write_config
from utils import invoke

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def _sinfo_answers() -> bool:
    if shutil.which("sinfo") is None:
        return False
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


if not _sinfo_answers():
    pytestmark.append(pytest.mark.skip(reason="no Slurm: sinfo does not answer (run scripts/local-slurm.sh as root)"))


def _job(job_id: str) -> dict:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=30).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def _wait(pred, timeout: float, what: str, job_id: str | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.5)
    state = _job(job_id) if job_id else {}
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}; job: {state.get('JobState')} {state.get('Reason')}")


def _steps(run_dir) -> int:
    p = run_dir / "metrics.jsonl"
    return len(p.read_text().splitlines()) if p.exists() else 0


def _summary(run_dir) -> dict | None:
    p = run_dir / "summary.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def _submit(cfg, *extra, env=None, monkeypatch=None) -> str:
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    r = invoke(["launch", "slurm", cfg, "--json", "--gpus-per-node", "2", "--set", "launch.env={OMP_NUM_THREADS: '1'}", *extra])
    assert r.exit_code == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    assert job_id and job_id.isdigit()
    return job_id


@pytest.fixture
def jobs():
    """Job ids submitted by a test; any still queued or running at the end is cancelled."""
    ids: list[str] = []
    yield ids
    for j in ids:
        subprocess.run(["scancel", j], capture_output=True, timeout=30)


def _release(job_id: str) -> None:
    """A requeued job waits for Slurm's begin-time delay (about 2 minutes); start it sooner.

    Not in the same second as the requeue: slurmd revokes the old job credential with one-second
    resolution, and a launch in that second is refused ("Job credential revoked").
    """
    import datetime as dt

    def requeued_long_enough():
        info = _job(job_id)
        if info.get("JobState") != "PENDING":
            return False
        submitted = dt.datetime.fromisoformat(info["SubmitTime"])  # reset to the requeue time
        return dt.datetime.now() >= submitted + dt.timedelta(seconds=2)

    _wait(requeued_long_enough, 120, "the requeued job to be pending", job_id)
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], capture_output=True, timeout=30)


@pytest.mark.timeout(420)
def test_submit_a_two_rank_job_and_it_completes(tmp_path, jobs):
    run_dir = tmp_path / "run"
    cfg = write_config(tmp_path / "train.yaml", run_dir, steps=20)
    t0 = time.monotonic()
    jobs.append(_submit(cfg))
    _wait(lambda: _steps(run_dir) >= 1, 240, "the first logged step", jobs[0])
    print(f"launch -> first logged step: {time.monotonic() - t0:.1f} s")
    s = _wait(lambda: (_summary(run_dir) or {}).get("status") == "completed" and _summary(run_dir), 240, "completed", jobs[0])
    assert s["steps"] == 20
    _wait(lambda: _job(jobs[0]).get("JobState") in ("COMPLETED", ""), 60, "the job to end", jobs[0])
    log = (run_dir / f"slurm-{jobs[0]}.out").read_text()
    assert "ddp x2 on cpu" in log and "this attempt of the run: completed" in log


@pytest.mark.timeout(600)
def test_preempted_job_is_requeued_and_resumes_to_the_same_weights(tmp_path, jobs, monkeypatch, uninterrupted_two_agents):
    steps = UNINTERRUPTED_STEPS
    base, out, code = uninterrupted_two_agents  # the same 2 gloo ranks, config and steps, uninterrupted (conftest.py)
    assert code == 0, out[-3000:]

    run_dir = tmp_path / "run"
    cfg = write_config(tmp_path / "train.yaml", run_dir, steps=steps)
    # The ranks pause at step 12 (first attempt only) so the signal lands mid-run, whatever the load.
    jobs.append(_submit(cfg, env={"RUBIN_FAULT": "pause@step=12,seconds=8"}, monkeypatch=monkeypatch))
    _wait(lambda: _steps(run_dir) >= 11, 300, "step 11", jobs[0])
    subprocess.run(["scancel", "--signal=USR1", "--batch", jobs[0]], check=True, timeout=30)
    t_signal = time.monotonic()
    _wait(lambda: int(_job(jobs[0]).get("Restarts", 0)) >= 1, 180, "the job to be requeued", jobs[0])
    s = _summary(run_dir)
    assert s["status"] == "preempted" and s["steps"] < steps
    preempted_at = s["steps"]
    assert (run_dir / "checkpoints" / f"step-{preempted_at:08d}" / "COMMITTED").exists()
    n_before = _steps(run_dir)
    _release(jobs[0])
    _wait(lambda: _steps(run_dir) > n_before, 300, "the first step after the resume", jobs[0])
    print(f"preemption -> first step after resume: {time.monotonic() - t_signal:.1f} s (requeue delay skipped)")
    s = _wait(lambda: (_summary(run_dir) or {}).get("status") == "completed" and _summary(run_dir), 300, "completed", jobs[0])
    assert s["steps"] == steps
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    kinds = [e["kind"] for e in events]
    assert "preempted" in kinds and "resume" in kinds[kinds.index("preempted"):]
    assert s["param_digest"] == json.loads((base / "summary.json").read_text())["param_digest"]
    log = (run_dir / f"slurm-{jobs[0]}.out").read_text()
    assert "this attempt of the run: preempted" in log and f"requeueing job {jobs[0]}" in log


@pytest.mark.timeout(600)
def test_time_limit_signal_saves_and_requeues(tmp_path, jobs):
    """A 3-minute limit with a 60 s grace: Slurm signals USR1 60-120 s in (it may be up to 60 s early),
    long before this run could finish; the ranks save and the job is requeued."""
    run_dir = tmp_path / "run"
    cfg = write_config(tmp_path / "train.yaml", run_dir, steps=500_000, checkpoint={"every_steps": 100_000},
                       telemetry={"log_every_steps": 100})
    jobs.append(_submit(cfg, "--set", "launch.time_limit=00:03:00", "--set", "launch.grace_s=60"))
    _wait(lambda: int(_job(jobs[0]).get("Restarts", 0)) >= 1, 400, "the job to be requeued at its time limit", jobs[0])
    s = _summary(run_dir)
    assert s["status"] == "preempted" and 0 < s["steps"] < 500_000
    assert (run_dir / "checkpoints" / f"step-{s['steps']:08d}" / "COMMITTED").exists()
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    stop = next(e for e in events if e["kind"] == "preempted")
    assert "SIGUSR1" in stop.get("reason", "")
    assert "requeueing job" in (run_dir / f"slurm-{jobs[0]}.out").read_text()
