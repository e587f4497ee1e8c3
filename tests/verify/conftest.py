"""Real training runs shared by the verify tests."""

from __future__ import annotations

import pytest
from verifyhelp import train


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify-runs")
    out = {f"base{s}": train(root / f"base{s}", f"run.seed={s}") for s in range(3)}
    out["rerun0"] = train(root / "rerun0", "run.seed=0")
    # A learning rate 30x too low: the migration bug the statistical method must flag.
    out.update({f"low{s}": train(root / f"low{s}", f"run.seed={s}", "optim.lr=0.001") for s in range(3)})
    out["wide"] = train(root / "wide", "model.args={hidden: 16, depth: 2}")
    return out
