"""Fault scenarios end to end, with real processes: signals, torn checkpoints, disk full, NaNs, payloads."""

import hashlib
import json
import os
import pickle
import signal
import subprocess
import sys
import time

import pytest

from trainhelp import events, mlp_args, summary
from utils import run_rubin

pytestmark = pytest.mark.slow
STEPS = 12


def _args(run_dir, *extra):
    return ["train", "--quiet", *mlp_args(run_dir, STEPS, "checkpoint.every_steps=3", "data.num_workers=1", *extra)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    run = tmp_path_factory.mktemp("ref") / "run"
    p = run_rubin(_args(run))
    assert p.returncode == 0, p.stderr
    return summary(run)["param_digest"]


def _ckpt(run, step):
    return run / "checkpoints" / f"step-{step:08d}"


def test_sigterm_commits_within_grace_exits_75_and_resumes(tmp_path, reference):
    run = tmp_path / "run"
    p = run_rubin(_args(run), env={"RUBIN_FAULT": "sigterm@step=5"})
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
    p = run_rubin(_args(run), env={"RUBIN_FAULT": "sigterm@step=6,phase=checkpoint"})
    assert p.returncode == 75, p.stderr[-2000:]
    for d in (run / "checkpoints").iterdir():
        assert not d.name.startswith(".tmp") or not (d / "COMMITTED").exists()
    check = run_rubin(["checkpoint", "verify", run])
    assert check.returncode == 0, check.stdout + check.stderr
    again = run_rubin(_args(run))
    assert again.returncode == 0
    assert summary(run)["param_digest"] == reference


def _truncate(d):
    f = d / "model.pt"
    f.write_bytes(f.read_bytes()[:100])


def _flip(d):
    f = d / "optim.pt"
    b = bytearray(f.read_bytes())
    b[len(b) // 2] ^= 0x01
    f.write_bytes(bytes(b))


def _drop(d):
    (d / "rng-rank-0.pt").unlink()


def _unmark(d):
    (d / "COMMITTED").unlink()


@pytest.mark.parametrize("damage", [_truncate, _flip, _drop, _unmark], ids=["truncated", "flipped-byte", "missing-file", "missing-marker"])
def test_damaged_newest_checkpoint_falls_back_and_completes(tmp_path, reference, damage):
    run = tmp_path / "run"
    assert run_rubin(_args(run), env={"RUBIN_FAULT": "crash@step=8"}).returncode == -9
    damage(_ckpt(run, 6))
    p = run_rubin(_args(run))
    assert p.returncode == 0, p.stderr[-2000:]
    ev = events(run)
    resumed = [e for e in ev if e["kind"] == "resume"]
    assert resumed and resumed[0]["step"] == 3  # fell back past the damaged step 6
    if damage is not _unmark:  # an unmarked folder is simply not a checkpoint yet
        bad = [e for e in ev if e["kind"] == "checkpoint_invalid"]
        assert bad and bad[0]["step"] == 6
    assert summary(run)["param_digest"] == reference


def test_disk_full_during_save_keeps_the_previous_checkpoint(tmp_path, reference):
    run = tmp_path / "run"
    p = run_rubin(_args(run), env={"RUBIN_FAULT": "diskfull@save=2"})
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
    assert p.returncode != 0
    assert "refusing to load" in p.stderr
    assert not marker.exists()


@pytest.mark.parametrize("policy", ["halt", "skip", "rollback"])
def test_nan_policies(tmp_path, reference, policy):
    run = tmp_path / "run"
    p = run_rubin(_args(run, f"faults.nan_policy={policy}"), env={"RUBIN_FAULT": "nan@step=5"})
    nan_events = [e for e in events(run) if e["kind"] == "nan"]
    assert nan_events and nan_events[0]["step"] == 5
    if policy == "halt":
        assert p.returncode == 1 and "faults.nan_policy=halt" in p.stderr
        return
    assert p.returncode == 0, p.stderr[-2000:]
    s = summary(run)
    assert s["steps"] == STEPS and s["final_loss"] is not None
    if policy == "skip":
        assert s["nan_skips"] == 1
        assert s["param_digest"] != reference  # one update was dropped
    else:
        rb = [e for e in events(run) if e["kind"] == "rollback"]
        assert s["rollbacks"] == 1 and rb[0]["to_step"] == 3
        assert s["nan_skips"] == 0
