"""No host sync in a step that does not log, save or evaluate (the GPU keeps its queue full).

On a CPU there is no device to wait for, so the test counts what would make the host wait on a
GPU: ``.item()``, ``float()``, ``int()``, ``bool()``, ``.tolist()``, ``.cpu()`` and ``.numpy()``
called on a tensor by rubin's own code during a step. On a GPU, ``set_sync_debug_mode("error")``
turns any synchronising call in such a step into an error.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from trainhelp import mlp_args, summary
from utils import invoke

import rubin
from rubin.train import trainer as trainer_mod
from rubin.train.faults import policy

SYNCS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__")
RUBIN_SRC = str(Path(rubin.__file__).resolve().parent)


def _watch(monkeypatch, device_type: str | None = None):
    """Run the loop with every step's rubin-made syncs counted and every check recorded, by step."""
    syncs, checked, current = defaultdict(list), set(), {"step": None}
    for name in SYNCS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if current["step"] is not None and caller.startswith(RUBIN_SRC):
                syncs[current["step"]].append(f"{_name} at {Path(caller).name}:{sys._getframe(1).f_lineno}")
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    step_fn, check_fn = trainer_mod.Trainer._step, policy.FaultPolicy.check

    def train_step(self, batches):
        current["step"] = self.loop.step + 1
        try:
            return step_fn(self, batches)
        finally:
            current["step"] = None

    def check(self, step, *args, **kwargs):
        checked.add(step)
        return check_fn(self, step, *args, **kwargs)

    monkeypatch.setattr(trainer_mod.Trainer, "_step", train_step)
    monkeypatch.setattr(policy.FaultPolicy, "check", check)
    monkeypatch.setattr(policy, "CHECK_EVERY_S", 1e9)  # only the loop's own points: log, save, eval, last
    return syncs, checked


def test_steps_between_log_points_make_no_host_sync(tmp_path, monkeypatch):
    syncs, checked = _watch(monkeypatch)
    run = tmp_path / "run"
    r = invoke(["train", "--quiet", *mlp_args(run, 12, "telemetry.log_every_steps=4", "checkpoint.every_steps=6")])
    assert r.exit_code == 0, r.stderr
    assert summary(run)["steps"] == 12
    assert checked == {1, 4, 6, 8, 12}  # the first step, log steps 4/8/12, the save at 6
    quiet = [s for s in range(1, 13) if s not in checked]
    assert {s: syncs[s] for s in quiet if syncs[s]} == {}
    assert all(syncs[s] for s in (4, 8, 12))  # the counter sees the reads a log step does make


def test_nan_policy_skip_pays_one_read_per_step(tmp_path, monkeypatch):
    """skip must know before optimizer.step(): every step reads its flags (documented in docs/faults.md)."""
    syncs, checked = _watch(monkeypatch)
    run = tmp_path / "run"
    r = invoke(["train", "--quiet", *mlp_args(run, 6, "telemetry.log_every_steps=3", "faults.nan_policy=skip")])
    assert r.exit_code == 0, r.stderr
    assert checked == set(range(1, 7)) and all(syncs[s] for s in range(1, 7))


@pytest.mark.gpu
def test_gpu_steps_between_log_points_do_not_synchronize(tmp_path, monkeypatch):
    """The steps between log points run under ``torch.cuda.set_sync_debug_mode("error")``."""
    _, checked = _watch(monkeypatch)
    step_fn = trainer_mod.Trainer._step
    expected_checks = {1, 4, 8, 12}
    errors = []

    def strict_step(self, batches):
        step = self.loop.step + 1
        if step in expected_checks:
            return step_fn(self, batches)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            return step_fn(self, batches)
        except RuntimeError as err:
            errors.append((step, str(err)))
            raise
        finally:
            torch.cuda.set_sync_debug_mode("default")

    monkeypatch.setattr(trainer_mod.Trainer, "_step", strict_step)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # what run.deterministic sets on CUDA; restored after the test
    run = tmp_path / "run"
    r = invoke(["train", "--quiet", *mlp_args(run, 12, "telemetry.log_every_steps=4", "run.device=cuda", "data.num_workers=0")])
    assert errors == [] and r.exit_code == 0, (errors, r.stderr)
    assert checked == expected_checks
