"""Issue 26 items 9-10: unreadable, renamed and non-file checkpoints are named for what they are."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hardkit import ROOT, step_dir, unprivileged
from utils import invoke


def _rubin_unprivileged(args) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))
    return subprocess.run(unprivileged([sys.executable, "-m", "rubin", *map(str, args)]), capture_output=True, text=True,
                          timeout=300, env=env, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("action", ["verify", "list"])
def test_an_unreadable_checkpoints_folder_is_one_line_exit_2(crashed_at_9, action):
    ckpts = crashed_at_9 / "checkpoints"
    ckpts.chmod(0)
    try:
        p = _rubin_unprivileged(["checkpoint", action, crashed_at_9])
    finally:
        ckpts.chmod(0o755)
    assert p.returncode == 2, p.stderr
    assert "cannot be read: permission denied" in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_an_unreadable_step_folder_is_listed_as_invalid(crashed_at_9):
    step_dir(crashed_at_9, 8).chmod(0)
    try:
        p = _rubin_unprivileged(["checkpoint", "verify", crashed_at_9])
    finally:
        step_dir(crashed_at_9, 8).chmod(0o755)
    assert p.returncode == 3, p.stderr
    assert "unreadable: Permission denied" in p.stdout and "resume would use: step 4" in p.stdout
    assert p.stderr == ""


@pytest.mark.parametrize("make", ["fifo", "dev_zero", "directory"])
def test_a_non_file_in_place_of_model_pt_is_not_called_missing(crashed_at_9, make):
    model = step_dir(crashed_at_9, 8) / "model.pt"
    model.unlink()
    {"fifo": lambda: os.mkfifo(model), "dev_zero": lambda: model.symlink_to("/dev/zero"), "directory": model.mkdir}[make]()
    r = invoke(["checkpoint", "verify", crashed_at_9])
    assert r.exit_code == 3
    line = next(ln for ln in r.stdout.splitlines() if "model.pt" in ln)
    kind = {"fifo": "a FIFO (named pipe)", "dev_zero": "a character device", "directory": "a directory"}[make]
    assert f"model.pt: is {kind}, not the regular file that was saved" in line and "missing" not in line


def test_a_renamed_step_folder_does_not_pass_as_another_step(crashed_at_9):
    step_dir(crashed_at_9, 8).rename(step_dir(crashed_at_9, 15))
    r = invoke(["checkpoint", "verify", crashed_at_9])
    assert r.exit_code == 3
    assert "holds step 8 but is named step-00000015" in r.stdout
    assert "resume would use: step 4" in r.stdout


def test_train_moves_an_unreadable_old_checkpoint_to_quarantine_not_trash(crashed_at_9):
    from hardkit import mlp_args

    old = step_dir(crashed_at_9, 4)
    old.chmod(0)
    try:
        p = _rubin_unprivileged(["train", "--quiet", *mlp_args(crashed_at_9, 12, "checkpoint.keep_last=1")])
    finally:
        for q in (old, crashed_at_9 / "checkpoints" / "quarantine" / "step-00000004"):
            if q.exists():
                q.chmod(0o755)
    assert p.returncode == 0, p.stderr
    ckpts = crashed_at_9 / "checkpoints"
    assert (ckpts / "quarantine" / "step-00000004" / "model.pt").is_file()  # kept whole, as evidence
    assert not list(ckpts.glob(".trash-*")) and not old.exists()
