"""Two real gloo ranks: DCP shards under one manifest, preemption agreement through the real loop, the hang watchdog."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import faultkit
import pytest

from rubin.train.checkpoint import MANIFEST, CheckpointStore

WORKER = Path(__file__).resolve().parents[1] / "fixtures" / "ckpt" / "worker.py"


def two_ranks(args, fault=None, timeout=60):
    """Start 2 ranks of the worker, as torchrun would (RANK, WORLD_SIZE, MASTER_*)."""
    port = faultkit.free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        env.pop("RUBIN_FAULT", None)
        if fault:
            env["RUBIN_FAULT"] = fault
        procs.append(subprocess.Popen([sys.executable, str(WORKER), *map(str, args)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    t0 = time.monotonic()
    return communicate_all(procs, timeout), time.monotonic() - t0


def communicate_all(procs, timeout):
    """(returncode, stdout, stderr) of every process, within one shared deadline; stragglers are killed."""
    results, t0 = [], time.monotonic()
    try:
        for p in procs:
            out, err = p.communicate(timeout=max(1.0, timeout - (time.monotonic() - t0)))
            results.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return results


@pytest.mark.timeout(120)
def test_two_ranks_write_dcp_shards_and_rank0_commits_them_all_then_async_saves_commit_only_when_every_rank_is_done(tmp_path):
    """One pair of gloo ranks (one start-up) runs both scenarios: DCP shards under one manifest, then async saves."""
    shards, saves = tmp_path / "dcp", tmp_path / "async"
    results, _ = two_ranks(["dcp_then_async_dist", shards, saves], timeout=90)
    for code, out, err in results:
        assert code == 0, err[-3000:]
        assert "latest 2" in out and "done" in out

    # DCP: both ranks' shards under one manifest, committed by rank 0
    store = CheckpointStore(shards, keep_last=2)
    path = shards / "step-00000002"
    assert store.latest_valid() == (2, path)
    man = json.loads((path / MANIFEST).read_text())
    on_disk = sorted(p.relative_to(path).as_posix() for p in path.rglob("*")
                     if p.is_file() and p.name not in ("MANIFEST.json", "COMMITTED"))
    assert sorted(man["files"]) == on_disk
    shards_on_disk = [f for f in on_disk if f.endswith(".distcp")]
    assert len(shards_on_disk) == 2 and "dcp/.metadata" in on_disk and {"rng-rank-0.pt", "rng-rank-1.pt"} <= set(on_disk)
    assert man["world_size"] == 2 and man["strategy"] == "fsdp"
    (path / shards_on_disk[1]).unlink()  # a shard lost after the fact is caught, and resume falls back
    assert store.latest_valid()[0] == 1

    # async: a step is committed only when every rank's background write is done
    store = CheckpointStore(saves, keep_last=5)
    assert [s for s, _ in store.committed()] == [1, 2, 3]
    for step, path in store.committed():
        assert store.verify(path) == []
        man = json.loads((path / MANIFEST).read_text())
        assert sorted(man["files"]) == ["model.pt", "rng-rank-0.pt", "rng-rank-1.pt"]
        assert not list(path.glob(".done-rank-*"))


def train_ranks(run_dir, cfg, fault, timeout=240):
    """``rubin train`` as 2 real gloo ranks with the environment torchrun gives them; RUBIN_FAULT on every rank."""
    port, procs = faultkit.free_port(), []
    for rank in range(2):
        env = faultkit.child_env(fault, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, "-m", "rubin", *faultkit.train_args(run_dir, cfg)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return communicate_all(procs, timeout)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("log_every", [1, 1000], ids=["checked-every-step", "checked-about-once-a-second"])
def test_signal_to_rank_1_only_stops_both_ranks_at_the_same_step_with_exit_75(tmp_path, log_every):
    """Through the real loop: rank 1 alone gets SIGTERM at step 5; the flag agreement stops rank 0 too.

    With log_every=1000 the loop only reads its flags at its timed checks, so this also shows
    that a signal is acted on between log points.
    """
    run = tmp_path / "run"
    cfg = faultkit.MLP + ["run.max_steps=100000", "checkpoint.every_steps=100000", f"telemetry.log_every_steps={log_every}"]
    results = train_ranks(run, cfg, "sigterm@step=5,rank=1")
    assert [code for code, _, _ in results] == [75, 75], [e[-2000:] for _, _, e in results]
    stopped = [int(re.search(r"preempted by .* at step (\d+)", err).group(1)) for _, _, err in results]
    assert stopped[0] == stopped[1] >= 5, stopped
    assert "signal SIGTERM" in results[1][2] and "a signal to another rank" in results[0][2]
    s = faultkit.summary(run)
    assert s["status"] == "preempted" and s["steps"] == stopped[0]
    assert [e["step"] for e in faultkit.events(run, "preempted")] == [stopped[0]]
    step_dir = faultkit.ckpt(run, stopped[0])
    assert (step_dir / "COMMITTED").is_file()  # the emergency save, written by both ranks
    assert {"rng-rank-0.pt", "rng-rank-1.pt"} <= {p.name for p in step_dir.iterdir()}
    if log_every == 1:
        assert stopped[0] == 5


@pytest.mark.timeout(300)
def test_a_signal_to_one_rank_during_setup_stops_both_after_the_first_step(tmp_path):
    """Rank 1 gets SIGTERM before its first step (the handlers are in place from the start of setup):
    it is not killed by the default action; both ranks take one step, agree, save it and exit 75."""
    run = tmp_path / "run"
    cfg = faultkit.MLP + ["run.max_steps=100000", "checkpoint.every_steps=100000"]
    results = train_ranks(run, cfg, "sigterm@phase=setup,rank=1")
    assert [code for code, _, _ in results] == [75, 75], [e[-2000:] for _, _, e in results]
    assert "sigterm at setup step=0 rank=1" in results[1][2]
    stopped = [int(re.search(r"preempted by .* at step (\d+)", err).group(1)) for _, _, err in results]
    assert stopped == [1, 1]
    step_dir = faultkit.ckpt(run, 1)
    assert (step_dir / "COMMITTED").is_file() and {"rng-rank-0.pt", "rng-rank-1.pt"} <= {p.name for p in step_dir.iterdir()}


@pytest.mark.timeout(90)
def test_watchdog_names_the_stalled_rank_and_both_exit(tmp_path):
    timeout_s = 3
    results, wall = two_ranks(["watchdog", tmp_path, timeout_s], fault="stall@step=5,rank=1,seconds=600", timeout=80)
    codes = [code for code, _, _ in results]
    assert all(c not in (0, None) for c in codes), codes
    for rank, (_, out, err) in enumerate(results):
        assert "finished without a hang" not in out
        assert "hang: rank(s) 1 stalled" in err, err[-2000:]
        report = (tmp_path / f"hang-rank-{rank}.txt").read_text()
        assert "stalled_ranks: [1]" in report and "step: 5" in report
        assert "Python stacks of all threads" in report and "scenario_watchdog" in report
        stuck = float(report.split("stuck_s: ")[1].split()[0])
        assert timeout_s <= stuck <= timeout_s + 10
    assert "phase: forward" in (tmp_path / "hang-rank-1.txt").read_text()
    assert "phase: collective" in (tmp_path / "hang-rank-0.txt").read_text()
    assert wall < 30 + timeout_s + 10  # process start (~30 s worst case on 2 busy cores) + timeout + 10 s
