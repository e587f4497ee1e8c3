"""Fault scenarios end to end, with real processes: signals, torn checkpoints, disk full, NaNs, payloads."""

import hashlib
import json
import math
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time

import pytest
from faultkit import DAMAGES, FAULT_CFG, metric_steps, scenario, train_args
from trainhelp import events, summary
from utils import invoke, run_rubin

pytestmark = pytest.mark.slow
REFERENCE_CFG = FAULT_CFG  # the `reference` fixture (conftest.py) trains it once, uninterrupted
STEPS = 12


# the faults, from the one scenario table shared with benchmarks/faults.py
SIGTERM_5 = scenario("SIGTERM at step 5, rerun").fault
SIGTERM_IN_SAVE = scenario("SIGTERM during checkpoint write").fault
CRASH_AT_8 = scenario("newest checkpoint truncated").fault  # checkpoints 3 and 6 on disk, then damaged
DISK_FULL = scenario("disk full during save").fault
NAN_5 = scenario("NaN at step 5, nan_policy=rollback").fault


def _args(run_dir, *extra):
    return train_args(run_dir, FAULT_CFG, *extra)  # 12 steps, a checkpoint every 3, one DataLoader worker



def _ckpt(run, step):
    return run / "checkpoints" / f"step-{step:08d}"


def test_sigterm_commits_within_grace_exits_75_and_resumes(tmp_path, reference):
    run = tmp_path / "run"
    p = run_rubin(_args(run), env={"RUBIN_FAULT": SIGTERM_5})
    assert p.returncode == 75, p.stderr[-2000:]
    assert "preempted" in p.stderr and "Traceback" not in p.stderr
    s = summary(run)
    assert s["status"] == "preempted" and s["steps"] == 5
    assert (_ckpt(run, 5) / "COMMITTED").exists()
    assert [e for e in events(run) if e["kind"] == "preempted"]
    again = run_rubin(_args(run))
    assert again.returncode == 0, again.stderr[-2000:]
    assert summary(run)["param_digest"] == reference


def test_external_sigterm_time_to_exit_within_grace(tmp_path):
    """A real signal from outside, as torchrun or the cloud sends it, while DataLoader workers run."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "rubin", *_args(run, "run.max_steps=100000", "checkpoint.every_steps=1000")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (run / "metrics.jsonl").exists():
            time.sleep(0.2)
        time.sleep(1.0)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        proc.kill()
    assert proc.returncode == 75, err[-2000:]
    assert elapsed < 25  # checkpoint.preemption_grace_s default
    assert "DataLoader worker" not in err and "Traceback" not in err
    s = summary(run)
    assert s["status"] == "preempted"
    assert (_ckpt(run, s["steps"]) / "COMMITTED").exists()


def test_sigterm_during_a_checkpoint_write_never_uses_a_torn_one(tmp_path, reference):
    run = tmp_path / "run"
    p = run_rubin(_args(run), env={"RUBIN_FAULT": SIGTERM_IN_SAVE})
    assert p.returncode == 75, p.stderr[-2000:]
    for d in (run / "checkpoints").iterdir():
        assert not d.name.startswith(".tmp") or not (d / "COMMITTED").exists()
    check = invoke(["checkpoint", "verify", run])
    assert check.exit_code == 0, check.stdout + check.stderr
    again = run_rubin(_args(run))
    assert again.returncode == 0
    assert summary(run)["param_digest"] == reference


@pytest.fixture(scope="module")
def killed_at_8(tmp_path_factory):
    """A run SIGKILLed at step 8 (checkpoints 3 and 6 committed), killed once and copied into each test that damages it."""
    run = tmp_path_factory.mktemp("killed-at-8") / "run"
    assert run_rubin(_args(run), env={"RUBIN_FAULT": CRASH_AT_8}).returncode == -9
    return run


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_newest_checkpoint_falls_back_and_completes(tmp_path, reference, killed_at_8, damage):
    run = tmp_path / "run"
    shutil.copytree(killed_at_8, run, symlinks=True)  # run.dir may change on resume
    DAMAGES[damage](_ckpt(run, 6))
    p = run_rubin(_args(run))
    assert p.returncode == 0, p.stderr[-2000:]
    ev = events(run)
    resumed = [e for e in ev if e["kind"] == "resume"]
    assert resumed and resumed[0]["step"] == 3  # fell back past the damaged step 6
    if damage != "missing-marker":  # an unmarked folder is simply not a checkpoint yet
        bad = [e for e in ev if e["kind"] == "checkpoint_invalid"]
        assert bad and bad[0]["step"] == 6
    assert summary(run)["param_digest"] == reference


def test_disk_full_during_save_keeps_the_previous_checkpoint(tmp_path, reference):
    run = tmp_path / "run"
    p = run_rubin(_args(run), env={"RUBIN_FAULT": DISK_FULL})
    assert p.returncode == 1
    assert "No space left on device" in p.stderr or "disk" in p.stderr.lower()
    assert len(p.stderr.strip().splitlines()) <= 2 and "Traceback" not in p.stderr
    assert (_ckpt(run, 3) / "COMMITTED").exists()
    assert not _ckpt(run, 6).exists()
    again = run_rubin(_args(run))
    assert again.returncode == 0, again.stderr[-2000:]
    assert summary(run)["param_digest"] == reference


class _Payload:
    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickle_payload_checkpoint_is_refused_and_nothing_runs(tmp_path):
    run = tmp_path / "run"
    assert run_rubin(_args(run), env={"RUBIN_FAULT": "crash@step=5"}).returncode == -9
    d = _ckpt(run, 3)
    marker = tmp_path / "pwned"
    payload = _Payload()
    payload.marker = marker
    (d / "trainer.pt").write_bytes(pickle.dumps({"loop": payload}))
    # Re-sign the manifest so only the payload check stands between it and execution.
    man = json.loads((d / "MANIFEST.json").read_text())
    data = (d / "trainer.pt").read_bytes()
    man["files"]["trainer.pt"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (d / "MANIFEST.json").write_text(json.dumps(man, indent=1, sort_keys=True))
    (d / "COMMITTED").write_text(json.dumps({"step": 3, "manifest_sha256": hashlib.sha256((d / "MANIFEST.json").read_bytes()).hexdigest()}))
    p = run_rubin(_args(run))
    assert not marker.exists()  # the payload never ran
    invalid = [e for e in events(run) if e["kind"] == "checkpoint_invalid"]
    assert invalid and invalid[0]["step"] == 3 and "trainer.pt" in invalid[0]["reason"]  # refused, not unpickled
    # the only checkpoint is bad: starting over from step 0 on top of it is refused (exit 2), not done silently
    assert p.returncode == 2 and "none verifies" in p.stderr, p.stderr[-2000:]


def _committed(run) -> list[int]:
    return sorted(int(d.name.split("-")[1]) for d in (run / "checkpoints").iterdir() if (d / "COMMITTED").exists())


@pytest.fixture
def in_process_nan_at_5(monkeypatch):
    """Run ``rubin train`` in this process with RUBIN_FAULT=nan@step=5 and only the loop's own flag checks
    (log, save, eval, last step): the timed check, about once a second, would read every step on slow cores."""
    from rubin.train.faults import inject, policy

    monkeypatch.setenv("RUBIN_FAULT", NAN_5)
    monkeypatch.setattr(policy, "CHECK_EVERY_S", 1e9)
    inject.reload()
    yield lambda args: invoke(args)
    monkeypatch.delenv("RUBIN_FAULT")
    inject.reload()


def test_nan_halt_stops_and_never_saves_the_poisoned_state(tmp_path):
    run = tmp_path / "run"
    p = run_rubin(_args(run, "faults.nan_policy=halt"), env={"RUBIN_FAULT": NAN_5})
    assert p.returncode == 1 and "faults.nan_policy=halt" in p.stderr and "step 5" in p.stderr, p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    assert [(e["step"], e["action"]) for e in events(run) if e["kind"] == "nan"] == [(5, "halt")]
    assert _committed(run) == [3]
    assert max(metric_steps(run)) == 4  # nothing after the bad step was logged as a result
    assert summary(run)["status"] == "failed"


def test_nan_halt_read_late_still_never_saves_the_poisoned_state(tmp_path, in_process_nan_at_5):
    """Flags read at steps 3, 4 and 6 only: the NaN of step 5 is found at step 6, before the save due there."""
    run = tmp_path / "run"
    r = in_process_nan_at_5(_args(run, "faults.nan_policy=halt", "telemetry.log_every_steps=4"))
    assert r.exit_code == 1 and "step 5" in r.stderr, r.stderr[-2000:]
    assert [(e["step"], e["action"]) for e in events(run) if e["kind"] == "nan"] == [(5, "halt")]
    assert _committed(run) == [3]  # step 6's save was due, but its flags said NaN first
    assert metric_steps(run) == [4]


def test_nan_skip_drops_exactly_one_update(tmp_path, reference):
    run = tmp_path / "run"
    p = run_rubin(_args(run, "faults.nan_policy=skip"), env={"RUBIN_FAULT": NAN_5})
    assert p.returncode == 0, p.stderr[-2000:]
    assert [(e["step"], e["action"]) for e in events(run) if e["kind"] == "nan"] == [(5, "skip")]
    s = summary(run)
    assert s["status"] == "completed" and s["steps"] == STEPS and s["nan_skips"] == 1
    assert s["final_loss"] is not None and math.isfinite(s["final_loss"])
    assert s["param_digest"] != reference  # one update was dropped


@pytest.fixture(scope="module")
def rollback_digest(tmp_path_factory):
    run = tmp_path_factory.mktemp("rollback") / "run"
    p = run_rubin(_args(run, "faults.nan_policy=rollback"), env={"RUBIN_FAULT": NAN_5})
    assert p.returncode == 0, p.stderr[-2000:]
    return run, summary(run)["param_digest"]


def test_nan_rollback_returns_to_the_last_checkpoint_and_skips_the_bad_batch(rollback_digest, reference):
    run, digest = rollback_digest
    s = summary(run)
    assert s["status"] == "completed" and s["steps"] == STEPS and s["rollbacks"] == 1 and s["nan_skips"] == 0
    assert [(e["step"], e["action"]) for e in events(run) if e["kind"] == "nan"] == [(5, "rollback")]
    rb = [e for e in events(run) if e["kind"] == "rollback"]
    # step 5 drew samples 128..159 of epoch 0 (4 steps x 32 before it): that window is skipped on the way back
    assert [(e["step"], e["to_step"], e["skipped_window"]) for e in rb] == [(5, 3, [0, 128])]
    assert digest != reference


def test_nan_rollback_read_late_ends_exactly_where_read_at_once_does(tmp_path, rollback_digest, in_process_nan_at_5):
    """Flags read at steps 3, 4 and 6 only: the NaN of step 5 is found at step 6, and the run ends bit-identical."""
    run = tmp_path / "run"
    r = in_process_nan_at_5(_args(run, "faults.nan_policy=rollback", "telemetry.log_every_steps=4"))
    assert r.exit_code == 0, r.stderr[-2000:]
    nan = [e for e in events(run) if e["kind"] == "nan"]
    rb = [e for e in events(run) if e["kind"] == "rollback"]
    assert [(e["step"], e["to_step"]) for e in rb] == [(5, 3)]
    assert rb[0]["time"] >= nan[0]["time"]
    assert summary(run)["param_digest"] == rollback_digest[1]
