"""The uninterrupted 2-rank job shared by the launch tests that compare a run against one."""

from __future__ import annotations

import pytest
from launchhelp import UNINTERRUPTED_STEPS, finish, launch_local, write_config


@pytest.fixture(scope="session")
def uninterrupted_two_agents(tmp_path_factory):
    """`rubin launch local --nodes 2 --gpus-per-node 1` for UNINTERRUPTED_STEPS steps, as real processes, run once:
    2 gloo ranks under DDP (the same ranks, data and digest as one torchrun with 2 ranks, or a 2-rank Slurm job).
    Returns (run dir, the launcher's output, its exit code); each user asserts the exit code itself."""
    root = tmp_path_factory.mktemp("uninterrupted-two-agents")
    run_dir = root / "run"
    proc = launch_local(write_config(root / "train.yaml", run_dir, steps=UNINTERRUPTED_STEPS))
    out = finish(proc, 300)
    return run_dir, out, proc.returncode
