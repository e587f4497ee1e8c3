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


def test_deep_checks_run_side_by_side_and_report_in_a_fixed_order(monkeypatch):
    import threading
    from types import SimpleNamespace

    from rubin.doctor import deep
    from rubin.doctor.findings import Finding

    # Two GPUs and the all-reduce: three subprocess checks. Each waits for the other two to have started,
    # which only happens when they run at the same time (one after another, the barrier breaks).
    barrier = threading.Barrier(3, timeout=20)

    def fake_gpu(index, timeout_s):
        barrier.wait()
        return Finding(f"deep.gpu.{index}", "deep.gpu", "ok", f"GPU {index}")

    def fake_allreduce(backend, timeout_s):
        barrier.wait()
        return Finding(f"deep.allreduce.{backend}", "deep.allreduce", "ok", backend)

    monkeypatch.setattr(deep, "gpu_check", fake_gpu)
    monkeypatch.setattr(deep, "allreduce_check", fake_allreduce)
    fact = lambda v: SimpleNamespace(get=lambda default=None: v)  # noqa: E731
    facts = SimpleNamespace(gpu_list=lambda: [SimpleNamespace(index=0), SimpleNamespace(index=1)],
                            software=SimpleNamespace(torch_cuda=fact("13.0"), torch_cuda_available=fact(True)))
    out = deep.run_all(facts, timeout_s=30)
    assert [f.id for f in out] == ["deep.gpu.0", "deep.gpu.1", "deep.allreduce.nccl"]
