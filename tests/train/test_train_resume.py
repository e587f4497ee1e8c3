"""Exact resume: a run killed (SIGKILL, for real) and rerun ends bit-identical to an uninterrupted one."""

import pytest
from faultkit import RESUME_CFG, SCENARIOS, train_args
from trainhelp import events, summary
from utils import run_rubin

pytestmark = pytest.mark.slow
REFERENCE_CFG = RESUME_CFG  # the `reference` fixture (conftest.py) trains it once, uninterrupted
STEPS = 40  # 16 steps per epoch: the run crosses two epoch boundaries


def _args(run_dir):
    # micro batch 8 of a global 32: 4 accumulation micro-steps; dropout exercises the RNG state.
    return train_args(run_dir, RESUME_CFG)



# mid-epoch, mid-accumulation (two micro-batches' gradients lost), first step of epoch 2, in backward, in the optimizer
@pytest.mark.parametrize("fault", [s.fault for s in SCENARIOS if s.kind == "sigkill"])
def test_sigkill_then_rerun_is_bit_identical(tmp_path, reference, fault):
    run = tmp_path / "run"
    killed = run_rubin(_args(run), env={"RUBIN_FAULT": fault})
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not (run / "summary.json").exists()  # it died: no summary, only checkpoints
    resumed = run_rubin(_args(run))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    s = summary(run)
    assert s["status"] == "completed" and s["steps"] == STEPS
    assert s["param_digest"] == reference
    kinds = [e["kind"] for e in events(run)]
    assert kinds.count("resume") == 1
