"""Capture: `rubin train --profile` on 2 gloo ranks, read back by `rubin profile`; stragglers named without
the profiler; a preemption inside the window; a window longer than the run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from faultkit import child_env, events, summary
from utils import invoke, run_torchrun

HERE = Path(__file__).resolve().parent
# a checkpoint at step 3; the window opens there: skip 2, warm-up 1, steps 7-10 traced; 14 steps in all
CFG = ["run.max_steps=14", "run.epochs=null", "model.import=slowparts:model", "data.import=slowparts:data", "data.task=classification",
       "data.batch_size=64", "data.num_workers=0", "checkpoint.every_steps=3", "telemetry.log_every_steps=1",
       "profile.skip=2", "profile.warmup=1", "profile.active=4", "run.device=cpu"]


def _args(run_dir, *extra):
    return ["train", "--quiet", "--profile", "--set", f"run.dir={run_dir}", *[a for c in [*CFG, *extra] for a in ("--set", c)]]


def _env(slow: str = "", **extra) -> dict:
    """What a training process needs on top of this one's environment: slowparts importable, the delay."""
    path = [str(HERE), *(os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return {"PYTHONPATH": os.pathsep.join(path), "PROFILE_SLOW": slow, **extra}


@pytest.mark.slow
@pytest.mark.parametrize("part", ["data", "compute"])
def test_slowed_rank_is_named_by_profile_and_by_the_run(tmp_path, part):
    run = tmp_path / "run"
    p = run_torchrun(2, _args(run), env=_env(f"{part}:1:0.04"), timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    meta = json.loads((run / "profile" / "rank-1.meta.json").read_text())
    assert meta["recorded"] == [7, 8, 9, 10] and meta["stopped"] is None
    trace = json.loads((run / "profile" / "rank-1.trace.json").read_text())
    steps = sorted(e["name"] for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#10", "ProfilerStep#7", "ProfilerStep#8", "ProfilerStep#9"]  # the training steps
    res = invoke(["profile", run, "--json"])
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["verdict"]["id"] == "straggler", out["verdict"]
    assert out["across"]["straggler"]["rank"] == 1 and out["across"]["straggler"]["bottleneck"] == part
    # without the profiler: the run itself named rank 1 from the own step times carried in its checks
    named = events(run, "straggler")
    assert named and named[0]["rank"] == 1
    s = summary(run)
    assert s["straggler"]["rank"] == 1
    assert s["own_step_s_per_rank"][1] > s["own_step_s_per_rank"][0] + 0.02


@pytest.mark.slow
def test_preemption_inside_the_window_exits_75_with_a_valid_checkpoint_and_the_steps_traced(tmp_path):
    run = tmp_path / "run"
    p = run_torchrun(2, _args(run), env=_env(RUBIN_FAULT="sigterm@step=8,rank=0"), timeout=240)
    # torchrun's agent reports each rank's exit code: both ranks stopped with 75 (preempted, checkpoint committed)
    codes = re.findall(r"rank\s*:\s*(\d+).*\n.*exitcode\s*:\s*(\d+)", p.stderr)
    assert {r for r, _ in codes} == {"0", "1"} and {c for _, c in codes} == {"75"}, p.stderr[-3000:]
    s = summary(run)
    assert s["status"] == "preempted"
    for rank in (0, 1):
        meta = json.loads((run / "profile" / f"rank-{rank}.meta.json").read_text())
        assert meta["stopped"] == "the run preempted inside the window"
        assert meta["recorded"] == list(range(7, s["steps"] + 1))
    v = invoke(["checkpoint", "verify", run])
    assert v.exit_code == 0, v.stdout + v.stderr
    assert f"step-{s['steps']:08d}" in v.stdout
    res = invoke(["profile", run, "--json"])  # what was traced before the stop is read
    assert res.exit_code == 0, res.stderr
    assert all(r["steps"] == len(range(7, s["steps"] + 1)) for r in json.loads(res.stdout)["ranks"])


def test_window_longer_than_the_run_is_refused_before_the_run_dir_is_touched(tmp_path):
    run = tmp_path / "run"
    res = invoke(_args(run, "profile.active=20"))
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1
    assert "profile window ends at step 26" in res.stderr and "the run has 14 steps" in res.stderr and "profile.active" in res.stderr
    assert not run.exists()


@pytest.mark.slow
def test_profiling_off_writes_nothing_and_single_rank_traces_the_window(tmp_path):
    off, on = tmp_path / "off", tmp_path / "on"
    env = child_env(**_env())
    args = [a for a in _args(off) if a != "--profile"]
    p = subprocess.run([sys.executable, "-m", "rubin", *args], env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    assert not (off / "profile").exists() and not events(off, "profile")
    p = subprocess.run([sys.executable, "-m", "rubin", *_args(on)], env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    ev = events(on, "profile")
    assert len(ev) == 1 and ev[0]["steps"] == [7, 8, 9, 10]
    assert ev[0]["overhead"]["untraced_step_s"] > 0 and ev[0]["overhead"]["traced_step_s"] > 0
    assert json.loads(invoke(["profile", on, "--json"]).stdout)["ranks"][0]["steps"] == 4





@pytest.mark.slow
def test_a_run_that_fails_inside_the_window_still_writes_the_steps_traced(tmp_path):
    run = tmp_path / "run"
    env = child_env(**_env(RUBIN_FAULT="nan@step=8"))  # nan_policy=halt: the run fails at step 8's check
    p = subprocess.run([sys.executable, "-m", "rubin", *_args(run)], env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 1, p.stderr[-2000:]
    assert summary(run)["status"] == "failed"
    meta = json.loads((run / "profile" / "rank-0.meta.json").read_text())
    assert meta["stopped"] == "the run failed inside the window" and meta["recorded"] == [7, 8]
    res = invoke(["profile", run, "--json"])
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["ranks"][0]["steps"] == 2
