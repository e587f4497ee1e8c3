"""Real processes killed mid-save, and a really full disk (RLIMIT_FSIZE): nothing torn is ever used."""

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rubin.train.checkpoint import CheckpointStore

WORKER = Path(__file__).resolve().parents[1] / "fixtures" / "ckpt" / "worker.py"


def spawn(args, fault=None):
    env = dict(os.environ)
    env.pop("RUBIN_FAULT", None)
    if fault:
        env["RUBIN_FAULT"] = fault
    return subprocess.Popen([sys.executable, str(WORKER), *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_line(proc, text, timeout=60):
    """Read stderr until TEXT appears (the fault harness announces a pause there)."""
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
        seen.append(line)
        if text in line:
            return
    proc.kill()
    raise AssertionError(f"never saw {text!r}; stderr: {''.join(seen)[-2000:]}")


def _stdout_line(proc, text, timeout) -> bool:
    """Whether TEXT appears on stdout within TIMEOUT seconds. Reads the pipe's fd itself: a buffered
    readline can take two lines at once and leave select() nothing to report."""
    fd, seen, deadline = proc.stdout.fileno(), b"", time.monotonic() + timeout
    while text.encode() not in seen:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 4096) if ready else b""
        if not chunk:  # timed out, or the worker closed its stdout
            return False
        seen += chunk
    return True


@pytest.mark.timeout(60)
@pytest.mark.parametrize("phase", ["checkpoint", "manifest", "commit"])
def test_sigkill_mid_save_leaves_no_committed_torn_checkpoint(tmp_path, phase):
    proc = spawn(["save", tmp_path, 1, 2], fault=f"pause@step=2,phase={phase},seconds=60")
    wait_for_line(proc, f"pause 60 s at {phase} step=2")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    tmp = tmp_path / ".tmp-step-00000002"
    assert tmp.is_dir() and (tmp / "model.pt").is_file()  # the kill really landed mid-save
    assert not (tmp_path / "step-00000002").exists()
    events = []
    store = CheckpointStore(tmp_path, keep_last=3, on_event=lambda k, d: events.append(k))
    assert store.latest_valid() == (1, tmp_path / "step-00000001") and events == []
    assert not tmp.exists()  # the restart cleaned it


@pytest.mark.timeout(60)
def test_sigterm_during_a_save_lets_it_commit_then_stops(tmp_path):
    proc = spawn(["save_preempt", tmp_path], fault="pause@step=2,phase=manifest,seconds=2")
    wait_for_line(proc, "pause 2 s at manifest step=2")
    os.kill(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 75, err[-2000:]
    assert "committed 2 requested=True signal=SIGTERM" in out
    store = CheckpointStore(tmp_path, keep_last=3)
    assert store.latest_valid() == (2, tmp_path / "step-00000002")


@pytest.mark.timeout(60)
def test_really_full_disk_gives_a_clear_error_and_keeps_the_previous(tmp_path):
    proc = spawn(["rlimit", tmp_path])
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "RubinError: checkpoint write failed: disk full (File too large)" in err
    assert "previous committed one is kept" in err
    store = CheckpointStore(tmp_path, keep_last=3)
    assert store.latest_valid() == (1, tmp_path / "step-00000001")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000001"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("phase", ["checkpoint", "commit"])
def test_sigkill_during_async_background_write_leaves_a_resumable_state(tmp_path, phase):
    proc = spawn(["async", tmp_path], fault=f"pause@step=2,phase={phase},seconds=60")
    wait_for_line(proc, f"pause 60 s at {phase} step=2")
    try:  # the loop moves on while the write is paused (60 s): its line can come just after the pause's
        moved_on = _stdout_line(proc, "submitted 2", timeout=30)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert moved_on  # the write was in the background
    assert not (tmp_path / "step-00000002").exists()
    store = CheckpointStore(tmp_path, keep_last=3)
    latest = store.latest_valid()
    assert latest == (1, tmp_path / "step-00000001") and store.verify(latest[1]) == []
    from rubin.train.checkpoint import load_file

    assert int(load_file(latest[1] / "model.pt")["step"]) == 1
