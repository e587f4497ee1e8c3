"""A run that fails or is refused gives back what it holds, and a save in flight still commits."""

import gc
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from faultkit import ASYNC_CFG, FAULT_CFG, child_env, train_args
from utils import invoke, run_rubin

from rubin.train.checkpoint import CheckpointStore

pytestmark = pytest.mark.slow


def _committed(run: Path) -> list[int]:
    return sorted(int(d.name.split("-")[1]) for d in (run / "checkpoints").iterdir() if (d / "COMMITTED").exists())


def _open_files_under(path: Path) -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(path)):
            out.append(target)
    return out


def _another_process_can_lock(run: Path) -> subprocess.CompletedProcess:
    code = f"from rubin import runlock; runlock.acquire({str(run)!r}).release(); print('locked')"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_a_halt_lets_the_async_save_in_flight_commit_before_exiting(tmp_path):
    """The save of step 3 is still being written (held 8 s) when a NaN at step 5 halts the run at the
    step-6 check. Exit would cut the daemon writer off and lose step 3; it must commit first."""
    run = tmp_path / "run"
    fault = "pause@phase=checkpoint,step=3,seconds=8;nan@step=5"
    p = run_rubin(train_args(run, ASYNC_CFG, "faults.nan_policy=halt"), env=child_env(fault))
    assert p.returncode == 1 and "nan_policy=halt" in p.stderr, p.stderr[-2000:]
    assert "waiting for the checkpoint of step 3 to commit" in p.stdout + p.stderr
    assert _committed(run) == [3]
    assert not [d for d in (run / "checkpoints").iterdir() if d.name.startswith(".tmp")]
    assert CheckpointStore(run / "checkpoints", keep_last=5).latest_valid()[0] == 3  # manifest and hashes verify
    assert (run / ".lock").read_text() == ""  # released


def test_a_signal_during_setup_is_a_stop_at_the_first_check_not_a_kill(tmp_path):
    """SIGTERM while the run is being built and restored (here: restored at step 3). Before the
    handlers were installed at the start of setup, the default action killed the process."""
    run = tmp_path / "run"
    assert run_rubin(train_args(run, FAULT_CFG), env=child_env("crash@step=5")).returncode == -signal.SIGKILL
    p = run_rubin(train_args(run, FAULT_CFG), env=child_env("sigterm@phase=setup"))
    assert p.returncode == 75, p.stderr[-2000:]
    assert "sigterm at setup step=3" in p.stderr and "preempted by signal SIGTERM at step 4" in p.stderr
    assert _committed(run) == [3, 4]  # the restored checkpoint is kept; the emergency save is a new step
    again = run_rubin(train_args(run, FAULT_CFG), env=child_env())
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads((run / "summary.json").read_text())["steps"] == 12


def test_a_refused_start_frees_the_run_dir_in_process(tmp_path):
    """``train()`` called from Python refuses a run whose checkpoints all fail to verify; the run dir
    must not stay locked (nor its files open) for as long as the calling process lives."""
    run = tmp_path / "run"
    assert run_rubin(train_args(run, FAULT_CFG), env=child_env("crash@step=5")).returncode == -signal.SIGKILL
    assert _committed(run) == [3]
    model = run / "checkpoints" / "step-00000003" / "model.pt"
    model.write_bytes(model.read_bytes()[:100])  # truncated: fails its hash
    r = invoke(train_args(run, FAULT_CFG))
    assert r.exit_code == 2 and "none verifies" in r.stderr, r.stderr[-2000:]
    assert _open_files_under(run) == []
    held = _another_process_can_lock(run)
    assert held.returncode == 0 and "locked" in held.stdout, held.stderr[-2000:]


def test_a_failed_run_in_process_restores_signals_and_the_collector(tmp_path, monkeypatch):
    from rubin.train.faults import inject

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)}
    monkeypatch.setenv("RUBIN_FAULT", "nan@step=5")
    inject.reload()
    try:
        r = invoke(train_args(tmp_path / "run", FAULT_CFG, "faults.nan_policy=halt", "run.gc_every_steps=2"))
    finally:
        monkeypatch.delenv("RUBIN_FAULT")
        inject.reload()
    assert r.exit_code == 1 and "nan_policy=halt" in r.stderr, r.stderr[-2000:]
    assert {sig: signal.getsignal(sig) for sig in before} == before
    assert gc.isenabled() and gc.get_freeze_count() == 0
    assert _open_files_under(tmp_path / "run") == []
    assert (tmp_path / "run" / ".lock").read_text() == ""
