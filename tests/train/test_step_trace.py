"""How many rubin files one real training step plus its save runs through (docs/architecture.md walks them).

The step is traced with ``sys.setprofile`` in this process, after three warm-up steps: from the
start of fetching its batches to the end of its checkpoint. A new layer of indirection in the
step or the save shows up here as a bigger count; the test fails, and the walk in
docs/architecture.md is to be updated with the new file, or the indirection taken out.
"""

from __future__ import annotations

import sys
from pathlib import Path

from trainhelp import mlp_args, summary
from utils import invoke

import rubin
from rubin.train import trainer as trainer_mod

RUBIN_SRC = str(Path(rubin.__file__).resolve().parent)
TRACED_STEP = 4  # steps 1-3 warm up; step 4 saves (checkpoint.every_steps=4) and does not log
# The step's own files: the loop, its fault policy (with the heartbeat), data, the loss, the strategy (with
# precision, optimizer and LR schedule) and telemetry (the console moves at log points only); the save's:
# checkpointer, store, manifest (durable files, manifest, marker), the run dir's event (runs, redact),
# and the RNG states through the device seam.
LOOP_FILES = {
    "train/trainer.py", "train/faults/policy.py", "train/data.py", "workloads/contract/outputs.py",
    "train/strategy.py", "train/observe/telemetry.py",
    "train/checkpoint/checkpointer.py", "train/checkpoint/store.py", "train/checkpoint/manifest.py",
    "runs.py", "redact.py", "platform/device.py",
}
# The workload itself (what a user's own model and dataset replace): the MLP and the synthetic data.
WORKLOAD_FILES = {"workloads/models/mlp.py", "workloads/data/synthetic.py", "workloads/data/arrays.py"}


def test_one_step_and_its_save_run_through_a_known_set_of_files(tmp_path, monkeypatch):
    entered: set[str] = set()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(RUBIN_SRC):
            entered.add(Path(frame.f_code.co_filename).relative_to(RUBIN_SRC).as_posix())

    next_batches, step = trainer_mod.Trainer._next_batches, trainer_mod.Trainer._step

    def traced_next_batches(self):
        if self.loop.step + 1 == TRACED_STEP:
            sys.setprofile(profile)
        return next_batches(self)

    def traced_step(self, batches):
        try:
            return step(self, batches)
        finally:
            sys.setprofile(None)

    monkeypatch.setattr(trainer_mod.Trainer, "_next_batches", traced_next_batches)
    monkeypatch.setattr(trainer_mod.Trainer, "_step", traced_step)
    run = tmp_path / "run"
    r = invoke(["train", "--quiet", *mlp_args(run, 6, "checkpoint.every_steps=4", "telemetry.log_every_steps=3",
                                              "data.num_workers=0")])
    assert r.exit_code == 0, r.stderr
    assert summary(run)["steps"] == 6 and (run / "checkpoints" / f"step-{TRACED_STEP:08d}" / "COMMITTED").is_file()
    # A file more: a new indirection in the step or the save. A file less: shorten the list (and the walk).
    assert sorted(entered - WORKLOAD_FILES) == sorted(LOOP_FILES)
    assert len(LOOP_FILES) <= 12  # the bound: widening the list above is a design change, not a test fix
