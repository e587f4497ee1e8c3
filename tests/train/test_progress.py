"""Issue 26 item 1: the progress bar on a terminal (steps, elapsed, ETA, last loss), drawn at log points only."""

from __future__ import annotations

import io
from types import SimpleNamespace

import rich.progress
from utils import invoke

import rubin.train.observe.console as console_mod


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _args(run, *extra):
    sets = [f"run.dir={run}", "run.max_steps=12", "run.epochs=null", "model.name=mlp", "model.args={hidden: 16, depth: 1}",
            "data.name=synthetic", "data.args={num_samples: 256, features: 8, num_classes: 4}", "data.batch_size=16",
            "telemetry.log_every_steps=4", "checkpoint.save_final=false", *extra]
    return ["train", *[a for s in sets for a in ("--set", s)]]


def test_the_bar_moves_at_log_points_only_and_shows_loss_elapsed_and_eta(tmp_path, monkeypatch):
    updates, fields = [], []
    real_update = rich.progress.Progress.update

    def update(self, task_id, **kw):
        updates.append(kw.get("completed"))
        if "info" in kw:
            fields.append(kw["info"])
        return real_update(self, task_id, **kw)

    monkeypatch.setattr(rich.progress.Progress, "update", update)
    monkeypatch.setattr(console_mod, "sys", SimpleNamespace(stdout=_Tty()))  # the console sees a terminal
    made = []
    real_init = console_mod.Console.__init__

    def init(self, **kw):
        real_init(self, **kw)
        made.append(self)

    monkeypatch.setattr(console_mod.Console, "__init__", init)
    r = invoke(_args(tmp_path / "run"))
    assert r.exit_code == 0, r.stderr
    assert made and made[0]._progress is None  # closed at the end
    assert updates == [0, 4, 8, 12]  # the start, then one per log point: nothing per step
    assert len(fields) == 3 and all(f.startswith("loss ") and "samples/s" in f for f in fields)
    cols = [type(c).__name__ for c in _columns(monkeypatch)]
    assert {"MofNCompleteColumn", "TimeElapsedColumn", "TimeRemainingColumn"} <= set(cols)


def _columns(monkeypatch):
    monkeypatch.setattr(console_mod, "sys", SimpleNamespace(stdout=_Tty()))
    c = console_mod.Console()
    c.begin(10, main=True)
    try:
        assert c._progress.speed_estimate_period == console_mod.SMOOTH_S
        return c._progress.columns
    finally:
        c.close()


def test_plain_lines_when_not_a_terminal_and_nothing_with_quiet(tmp_path):
    r = invoke(_args(tmp_path / "run"))
    assert r.exit_code == 0, r.stderr
    steps = [ln for ln in r.stdout.splitlines() if ln.startswith("step ")]
    assert [ln.split()[1] for ln in steps] == ["4/12", "8/12", "12/12"] and "loss" in steps[0]
    q = invoke([*_args(tmp_path / "run2"), "--quiet"])
    assert q.exit_code == 0 and not [ln for ln in q.stdout.splitlines() if ln.startswith("step ")]
