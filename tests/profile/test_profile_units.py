"""The pieces of capture that need no processes: window bounds, the straggler recorder, the report section."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from profhelp import gpu_steps, write_rank
from utils import invoke

from rubin.errors import UsageError
from rubin.train.observe import profiling
from rubin.train.observe.stragglers import PERSIST, StragglerRecorder


def _pcfg(skip=3, warmup=1, active=5):
    return SimpleNamespace(skip=skip, warmup=warmup, active=active)


def test_window_opens_after_the_first_checkpoint_and_after_compile():
    assert profiling.window(_pcfg(), ckpt_every=10, compile=False, total_steps=100) == (10, 15, 19)
    assert profiling.window(_pcfg(), ckpt_every=None, compile=True, total_steps=100) == (2, 7, 11)
    assert profiling.window(_pcfg(), ckpt_every=None, compile=False, total_steps=100) == (0, 5, 9)
    # a checkpoint interval past the run's end is no reason to wait
    assert profiling.window(_pcfg(), ckpt_every=500, compile=False, total_steps=100) == (0, 5, 9)
    with pytest.raises(UsageError, match=r"ends at step 109 .* the run has 100 steps"):
        profiling.window(_pcfg(active=95), ckpt_every=10, compile=False, total_steps=100)


def test_straggler_recorder_names_a_persistently_slow_rank_once():
    seen = []
    rec = StragglerRecorder(rank=0, world_size=3, event=lambda kind, **d: seen.append((kind, d)))
    for i in range(PERSIST - 1):
        rec.update([10_000, 10_500, 30_000], step=i + 1)  # rank 2: 30 ms against 10 ms
    assert seen == []  # not yet persistent
    rec.update([10_000, 10_500, 30_000], step=PERSIST)
    assert [k for k, _ in seen] == ["straggler"] and seen[0][1]["rank"] == 2
    assert seen[0][1]["excess_s"] == pytest.approx(0.030 - 0.01025)
    rec.update([10_000, 10_500, 30_000], step=PERSIST + 1)
    assert len(seen) == 1  # named once, not at every check
    assert rec.summary()["straggler"]["rank"] == 2
    assert rec.summary()["own_step_s_per_rank"][2] == pytest.approx(0.030)


def test_straggler_recorder_ignores_noise_and_interrupted_streaks():
    seen = []
    rec = StragglerRecorder(rank=1, world_size=2, event=lambda kind, **d: seen.append(kind))
    for step in range(10):
        rec.update([10_000, 11_000], step=step)  # 10% apart: noise
        rec.update([10_000, 30_000] if step % 2 else [10_000, 10_000], step=step)  # slow every other check only
    assert seen == [] and rec.summary()["straggler"] is None


def test_straggler_recorder_slots_carry_this_ranks_own_time_only():
    rec = StragglerRecorder(rank=1, world_size=3)
    rec.beat("data")
    rec.beat("forward")
    rec.beat("backward")
    slots = rec.slots()
    assert slots[0] == 0 and slots[2] == 0 and slots[1] > 0
    assert rec.slots() == [0, 0, 0]  # reset after each check


def test_report_shows_a_profiled_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("run: {}\n")
    for r in (0, 1):
        write_rank(run, r, gpu_steps(kernels=[(5000, 5000, "sm90_xmma_gemm")], data=[(0, 5000, "")]))
    out = tmp_path / "r.html"
    res = invoke(["report", run, "-o", out])
    assert res.exit_code == 0, res.stderr
    html = out.read_text()
    kinds = re.findall(r"data-kind='([a-z-]+)'", html)
    assert kinds == ["run", "profile"]
    section = html[html.index("data-kind='profile'"):]
    assert "data-bound: the step waits for the data loader" in section
    assert "step time per rank" in section and "<svg" in section  # the stacked breakdown
    assert "sm90_xmma_gemm" in section  # the top kernels


def test_a_run_resumed_past_the_window_does_not_profile(tmp_path):
    said = []
    info = SimpleNamespace(rank=0, world_size=1, is_main=True, device=SimpleNamespace(type="cpu"))
    w = profiling.ProfileWindow(_pcfg(), info, tmp_path, run_id="r", bounds=(0, 5, 9), say=said.append)
    w.step(6)  # the first loop iteration after a resume at step 6
    w.step(7)
    w.close("completed", 9)
    assert w.prof is None and w.done and not (tmp_path / "profile").exists()
    assert len(said) == 1 and "past the window's start (step 4)" in said[0]
