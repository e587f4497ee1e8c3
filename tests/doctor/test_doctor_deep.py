"""`rubin doctor --deep`: the real 2-rank gloo all-reduce on CPU, and naming the failing rank."""

from __future__ import annotations

import dataclasses
import json

import pytest
from utils import invoke

from rubin.doctor.deep import allreduce_check


@pytest.mark.slow
def test_failing_rank_is_named():
    f = allreduce_check("gloo", timeout_s=60, fail_rank=1)
    assert f.severity == "error" and "rank 1 failed first" in f.title
    assert "rank 1: injected failure" in f.evidence


@pytest.mark.slow
def test_doctor_deep_cli_on_cpu_and_the_gloo_allreduce_smoke_test_really_runs():
    r = invoke(["doctor", "--deep", "--json", "--only", "system"])
    rep = json.loads(r.stdout)
    deep = {f["id"]: f for f in rep["findings"] if f["check"].startswith("deep.")}
    if not rep["facts"]["gpus"]["value"]:
        assert deep["deep.gpu"]["severity"] == "info"
        assert deep["deep.allreduce.gloo"]["severity"] == "ok"
    # the 2-rank gloo all-reduce really ran: the CLI's own (no or one GPU), else run here (the CLI picked nccl)
    gloo = deep.get("deep.allreduce.gloo") or dataclasses.asdict(allreduce_check("gloo", timeout_s=90))
    assert gloo["severity"] == "ok", gloo
    assert "rank 0: 3.0 (expected 3.0)" in gloo["evidence"] and "rank 1: 3.0" in gloo["evidence"]


@pytest.mark.gpu
def test_deep_gpu_matmul_on_every_gpu():
    from rubin.doctor.deep import gpu_check

    assert gpu_check(0, timeout_s=120).severity == "ok"
