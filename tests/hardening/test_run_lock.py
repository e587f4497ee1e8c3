"""Issue 16 item 4: one writer per run dir, for the run's lifetime, tested with two real processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from hardkit import events, mlp_args, rubin, summary

from rubin import runlock
from rubin.errors import UsageError


def _start(run, *extra_env) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1", RUBIN_FAULT="pause@step=2,seconds=600")
    return subprocess.Popen([sys.executable, "-m", "rubin", "train", *mlp_args(run, 6)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)


def _wait_for(cond, what: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def _kill(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    p.communicate(timeout=60)


@pytest.mark.parametrize("offset_s", [0, 1, 8])
def test_second_job_on_a_run_dir_exits_2_naming_the_holder(tmp_path, offset_s):
    run = tmp_path / "run"
    a = _start(run)
    b = None
    try:
        t0 = time.monotonic()
        _wait_for(lambda: time.monotonic() - t0 >= offset_s or a.poll() is not None, f"{offset_s} s")
        b = _start(run)
        # whichever got there first holds the lock and pauses at step 2; the other must leave with exit 2
        _wait_for(lambda: a.poll() is not None or b.poll() is not None, "one of the two jobs to exit")
        loser, winner = (a, b) if a.poll() is not None else (b, a)
        _, err = loser.communicate(timeout=60)
        assert loser.returncode == 2, err[-2000:]
        line = err.strip().splitlines()[-1]
        assert f"in use by PID {winner.pid} on {socket.gethostname()} since " in line and "Traceback" not in err
        assert winner.poll() is None  # the holder carries on, undisturbed
        _wait_for(lambda: any(e["kind"] == "start" for e in events(run)), "the holder's start event")
        assert [e["kind"] for e in events(run)].count("start") == 1  # the loser wrote nothing into the run
        rec = json.loads((run / runlock.LOCK).read_text())
        assert rec["pid"] == winner.pid and rec["host"] == socket.gethostname()
    finally:
        for p in (a, b):
            if p is not None:
                _kill(p)
    if offset_s != 1:
        return
    # The holder died without releasing (SIGKILL): the next job takes the stale lock over, with an event.
    p = rubin(["train", *mlp_args(run, 6)])
    assert p.returncode == 0, p.stderr[-2000:]
    taken = [e for e in events(run) if e["kind"] == "lock_taken_over"]
    assert taken and taken[0]["previous"]["pid"] == winner.pid
    assert summary(run)["steps"] == 6
    assert (run / runlock.LOCK).read_text() == ""  # released at the end


def test_stale_record_without_flock_is_taken_over_only_when_its_process_is_gone(tmp_path, monkeypatch):
    import fcntl

    def no_flock(fd, op):
        raise OSError(37, "No locks available")  # ENOLCK, as on a network filesystem without lock support

    monkeypatch.setattr(fcntl, "flock", no_flock)
    run = tmp_path / "run"
    run.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run / runlock.LOCK).write_text(json.dumps({"host": socket.gethostname(), "pid": dead.pid, "start_time": 1.0}))
    lock = runlock.acquire(run)
    try:
        assert lock.taken_over["pid"] == dead.pid and not lock.flocked
        assert json.loads((run / runlock.LOCK).read_text())["pid"] == os.getpid()
    finally:
        lock.release()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        (run / runlock.LOCK).write_text(json.dumps({"host": socket.gethostname(), "pid": alive.pid, "start_time": 1.0}))
        with pytest.raises(UsageError, match=f"in use by PID {alive.pid} on {socket.gethostname()} since"):
            runlock.acquire(run)
        (run / runlock.LOCK).write_text(json.dumps({"host": "other-node", "pid": 1, "start_time": 1.0}))
        with pytest.raises(UsageError, match="in use by PID 1 on other-node"):  # another host: cannot tell, refuse
            runlock.acquire(run)
    finally:
        alive.kill()
        alive.wait()


def test_lock_is_reentrant_in_one_process_and_released_empty(tmp_path):
    lock = runlock.acquire(tmp_path / "r")
    assert runlock.acquire(tmp_path / "r") is lock
    lock.release()
    assert (tmp_path / "r" / runlock.LOCK).read_text() == ""
    again = runlock.acquire(tmp_path / "r")
    assert again is not lock and again.taken_over is None  # an empty record is a free lock, not a stale one
    again.release()
