"""Multi-rank faults with torchrun: elastic restart, a different world size on resume, a stalled rank, async saves."""

import time

import pytest
from trainhelp import events, losses, mlp_args, summary
from utils import run_rubin, run_torchrun

from rubin.train.faults.watchdog import read_all

pytestmark = pytest.mark.slow
STEPS = 12


def _args(run_dir, *extra):
    return ["train", "--quiet", *mlp_args(run_dir, STEPS, "checkpoint.every_steps=3", *extra)]


def _torchrun(args, *, env=None, max_restarts=0, timeout=90):
    return run_torchrun(2, args, env=env, max_restarts=max_restarts, timeout=timeout)


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """The uninterrupted one-process run (sync checkpoints): the reference of the resume and async tests."""
    run = tmp_path_factory.mktemp("single") / "run"
    p = run_rubin(_args(run))
    assert p.returncode == 0, p.stderr[-2000:]
    return run


def test_rank_crash_under_max_restarts_completes_identically(tmp_path):
    ref = tmp_path / "ref"
    p = _torchrun(_args(ref, "distributed.strategy=ddp"))
    assert p.returncode == 0, p.stderr[-3000:]
    run = tmp_path / "run"
    p = _torchrun(_args(run, "distributed.strategy=ddp"), env={"RUBIN_FAULT": "crash@step=7,rank=1"}, max_restarts=1)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "crash at step step=7 rank=1" in p.stderr
    s = summary(run)
    assert s["status"] == "completed" and s["steps"] == STEPS
    assert s["param_digest"] == summary(ref)["param_digest"]
    restarts = [e for e in events(run) if e["kind"] == "restart"]
    assert restarts and restarts[0]["restart_count"] == 1
    resumes = [e["step"] for e in events(run) if e["kind"] == "resume"]
    assert resumes and set(resumes) == {6}  # more than one only if the launch had to be repeated


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_resume_at_a_different_world_size(tmp_path, single, strategy):
    run = tmp_path / "run"
    p = _torchrun(_args(run, f"distributed.strategy={strategy}"), env={"RUBIN_FAULT": "crash@step=8"})
    assert p.returncode != 0
    assert (run / "checkpoints" / "step-00000006" / "COMMITTED").exists()
    # Resume the 2-rank checkpoint in one process: DCP reshards FSDP state, the data order is global.
    p = run_rubin(_args(run, "distributed.strategy=auto"))
    assert p.returncode == 0, p.stderr[-3000:]
    s = summary(run)
    assert s["steps"] == STEPS and s["world_size"] == 1
    resumed = losses(run)[-(STEPS - 6):]
    straight = losses(single)[-(STEPS - 6):]
    assert max(abs(a - b) for a, b in zip(resumed, straight)) < 1e-4


def test_stalled_rank_is_named_and_the_job_exits(tmp_path):
    run = tmp_path / "run"
    t0 = time.monotonic()
    p = _torchrun(_args(run, "distributed.strategy=ddp", "faults.hang_timeout_s=5", "distributed.timeout_s=300"),
                  env={"RUBIN_FAULT": "stall@step=5,rank=1"}, timeout=120)
    elapsed = time.monotonic() - t0
    assert p.returncode != 0
    assert "rank(s) 1 stalled" in p.stderr
    assert elapsed < 5 + 10 + 30  # timeout + 10 s, plus process start-up and torchrun teardown
    for rank in (0, 1):
        report = (run / f"hang-rank-{rank}.txt").read_text()
        assert "stalled_ranks: [1]" in report and "Python stacks" in report
    assert [e for e in events(run) if e["kind"] == "hang"]
    beats = read_all(run, 2)  # written by each rank's watchdog thread, the stalled rank's too
    assert beats[0] and beats[1] and beats[1]["step"] < beats[0]["step"]  # the stalled rank shows as behind


def test_without_a_watchdog_no_heartbeat_file_is_written(single):
    assert summary(single)["status"] == "completed"
    assert not (single / "heartbeats").exists()  # the beats stay in memory: nobody would read the files


def test_async_checkpoints_match_sync_and_survive_a_kill_mid_write(tmp_path, single):
    sync = single
    run = tmp_path / "async"
    p = run_rubin(_args(run, "checkpoint.async=true"), env={"RUBIN_FAULT": "crash@step=9,phase=manifest"})
    assert p.returncode == -9, p.stderr[-2000:]
    # The kill hit the background write of step 9: it must not be a committed checkpoint.
    assert not (run / "checkpoints" / "step-00000009").exists()
    p = run_rubin(_args(run, "checkpoint.async=true"))
    assert p.returncode == 0, p.stderr[-2000:]
    assert [e["step"] for e in events(run) if e["kind"] == "resume"] == [6]
    assert summary(run)["param_digest"] == summary(sync)["param_digest"]
