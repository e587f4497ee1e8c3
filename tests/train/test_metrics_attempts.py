"""Steps re-done after a resume or a rollback are marked in metrics.jsonl, and readers take the last row per step."""

import json
import statistics

import pytest
from utils import run_rubin

from rubin.runs import last_per_step, read_jsonl
from rubin.train.checkpoint import load_file

pytestmark = pytest.mark.slow


def _args(run_dir, *extra):
    sets = [
        f"run.dir={run_dir}", "run.max_steps=10", "run.epochs=null", "run.deterministic=true",
        "model.name=mlp", "model.args={hidden: 32, depth: 1}",
        "data.name=synthetic", "data.args={num_samples: 512, features: 16, num_classes: 4}", "data.batch_size=32",
        "checkpoint.every_steps=4", "telemetry.log_every_steps=1", "run.eval_every_steps=2", *extra,
    ]
    return ["train", "--quiet", *[a for s in sets for a in ("--set", s)]]


def _rows(run, name="metrics.jsonl"):
    return read_jsonl(run / name)


def test_resume_marks_redone_steps_and_summary_takes_the_last(tmp_path):
    """Also: the spike detector's running median is in the checkpoint and survives the resume."""
    run = tmp_path / "run"
    p = run_rubin(_args(run, "faults.spike_factor=1000"), env={"RUBIN_FAULT": "crash@step=7"})  # SIGKILL: steps 5 and 6 logged, not saved
    assert p.returncode == -9, p.stderr[-2000:]
    first = _rows(run)
    assert [r["step"] for r in first] == [1, 2, 3, 4, 5, 6]
    assert all(r["attempt"] == 1 for r in first)
    p = run_rubin(_args(run, "faults.spike_factor=1000"))
    assert p.returncode == 0, p.stderr[-2000:]
    rows = _rows(run)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6, 5, 6, 7, 8, 9, 10]
    assert [r["attempt"] for r in rows] == [1, 1, 1, 1, 1, 1, 2, 2, 1, 1, 1, 1]
    last = last_per_step(rows)
    assert [r["step"] for r in last] == list(range(1, 11))
    assert [r["attempt"] for r in last if r["step"] in (5, 6)] == [2, 2]
    evals = _rows(run, "eval.jsonl")
    assert [(r["step"], r["attempt"]) for r in evals] == [(2, 1), (4, 1), (6, 1), (6, 2), (8, 1), (10, 1)]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["final_loss"] == last[-1]["loss"]
    # Saved at step 8 by the resumed process: steps 1-4 came from the checkpoint it resumed from.
    history = load_file(run / "checkpoints" / "step-00000008" / "trainer.pt")["spikes"]["history"]
    assert history == pytest.approx([r["loss"] for r in last[:8]], rel=1e-6)


def test_rollback_marks_redone_steps_and_summary_counts_each_step_once(tmp_path):
    run = tmp_path / "run"
    p = run_rubin(_args(run, "faults.nan_policy=rollback"), env={"RUBIN_FAULT": "nan@step=6"})
    assert p.returncode == 0, p.stderr[-2000:]
    rows = _rows(run)
    redone = [r["step"] for r in rows if r["attempt"] == 2]
    assert redone and min(redone) == 5  # rolled back to step 4: step 5 onwards re-done, once
    assert all(r["attempt"] in (1, 2) for r in rows)
    last = last_per_step(rows)
    assert [r["step"] for r in last] == list(range(1, 11))
    # The summary's throughput: the median over the last row of each step, the first (warm-up) left out.
    summary = json.loads((run / "summary.json").read_text())
    assert summary["samples_per_s"] == pytest.approx(statistics.median(r["samples_per_s"] for r in last[1:]))
