"""A killed run shared by the hardening tests: trained and killed once, copied into each test that damages it."""

from __future__ import annotations

import shutil

import pytest
from hardkit import mlp_args, rubin, step_dir

from rubin.train.checkpoint import manifest as mf


@pytest.fixture(scope="session")
def _killed_at_9(tmp_path_factory):
    run = tmp_path_factory.mktemp("killed-at-9") / "run"
    p = rubin(["train", *mlp_args(run, 12)], env={"RUBIN_FAULT": "crash@step=9"})
    assert p.returncode != 0
    assert (step_dir(run, 8) / mf.COMMITTED).is_file() and (step_dir(run, 4) / mf.COMMITTED).is_file()
    return run


@pytest.fixture
def crashed_at_9(_killed_at_9, tmp_path):
    """A 12-step run killed after step 8 (a real crash in a real process): checkpoints 4 and 8 are committed.

    Each test gets its own copy at ``tmp_path / "run"`` to damage and resume (run.dir may change on resume)."""
    run = tmp_path / "run"
    shutil.copytree(_killed_at_9, run, symlinks=True)
    return run
