"""Inputs for the report tests, made by rubin itself: a real run, a real verify result, real doctor/env/
plan output; bench results are the recorded CPU results file (a bench run takes over a minute)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from utils import ROOT, invoke

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "verify"))

BENCH = ROOT / "tests" / "fixtures" / "bench" / "cpu-quick.json"


@pytest.fixture(scope="session")
def inputs(tmp_path_factory):
    from verifyhelp import train

    root = tmp_path_factory.mktemp("report-inputs")
    runs = [train(root / f"run{s}", f"run.seed={s}") for s in range(3)]
    out = {"run": runs[0], "bench": BENCH}
    for name, args in (("verify", ["verify", *runs, "--new", *runs, "--json"]), ("env", ["env", "--json", "--quick"]),
                       ("doctor", ["doctor", "--json"]), ("compare", ["compare", BENCH, BENCH, "--json"]),
                       ("plan", ["plan", "memory", "--workload", "gpt", "--gpu", "H100-SXM", "--gpus", "8", "--json"])):
        r = invoke(args)
        assert r.exit_code in (0, 3), (name, r.stderr)
        json.loads(r.stdout)
        (root / f"{name}.json").write_text(r.stdout)
        out[name] = root / f"{name}.json"
    return out
