"""The analysis of `rubin profile`: interval arithmetic, synthetic GPU traces with known answers, and
real CPU traces recorded by 2 gloo ranks with one rank slowed."""

from __future__ import annotations

import json

import pytest
from profhelp import gpu_steps, record, write_rank, x
from utils import invoke

from rubin.profile import timeline as tl
from rubin.profile.analyze import analyze


def test_interval_arithmetic():
    a = tl.merge([(5, 8), (0, 2), (1, 3), (10, 12)])
    assert a == [(0, 3), (5, 8), (10, 12)]
    assert tl.total(a) == 8
    assert tl.intersect(a, [(2, 6), (11, 20)]) == [(2, 3), (5, 6), (11, 12)]
    assert tl.subtract([(0, 10)], [(2, 3), (5, 6), (9, 12)]) == [(0, 2), (3, 5), (6, 9)]
    assert tl.clip([(0, 4), (6, 9)], 3, 7) == [(3, 4), (6, 7)]


def test_gpu_breakdown_overlap_and_top_kernels(tmp_path):
    # per 10 ms step: compute 0-6 ms, an all-reduce 4-8 ms (2 ms of it under compute), 2 ms idle with the host busy
    ev = gpu_steps(kernels=[(0, 6000, "sm90_xmma_gemm_bf16")], comm=[(4000, 4000, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL")],
                   host=[(8000, 1000, "aten::copy_")])
    # the other half of the idle time: an operator on autograd's thread (backward on a GPU runs there)
    ev += [x("autograd::engine::evaluate_function: MmBackward0", i * 10_000 + 9000, 1000, tid=2) for i in range(3)]
    for r in (0, 1):
        write_rank(tmp_path, r, ev)
    res = analyze(tmp_path)
    m = res["ranks"][0]["median"]
    assert m["step_s"] == pytest.approx(0.010)
    assert m["compute_s"] == pytest.approx(0.006)
    assert m["comm_s"] == pytest.approx(0.002)  # only the part not hidden under compute
    assert m["overlap"] == pytest.approx(0.5)
    assert m["idle_s"] == pytest.approx(0.002) and m["host_only_s"] == pytest.approx(0.002)
    names = [k["name"] for k in res["ranks"][0]["top_kernels"]]
    assert names == ["sm90_xmma_gemm_bf16", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"]
    assert res["ranks"][0]["top_kernels"][0]["count"] == 3


@pytest.mark.parametrize("case, expect", [
    ("launch", "launch-bound"), ("comm", "comm-bound"), ("data", "data-bound"), ("memory", "memory-bound"),
    ("small-gemm", "small-matmuls"), ("healthy", "compute-bound")])
def test_gpu_verdicts(tmp_path, case, expect):
    tiny = [(i * 100, 5, "void at::native::vectorized_elementwise_kernel") for i in range(60)]  # 5 us each, 95 us gaps
    kernels = {
        "launch": dict(kernels=tiny, host=[(0, 9000, "aten::add")]),
        "comm": dict(kernels=[(0, 5000, "sm90_xmma_gemm")], comm=[(5000, 5000, "ncclDevKernel_AllReduce")]),
        "data": dict(kernels=[(5000, 5000, "sm90_xmma_gemm")], data=[(0, 5000, "")]),
        "memory": dict(kernels=[(0, 2000, "sm90_xmma_gemm"), (2000, 7500, "vectorized_elementwise_kernel<add>")]),
        "small-gemm": dict(kernels=[(i * 50, 30, "ampere_sgemm_32x32") for i in range(180)]
                           + [(9000, 900, "void flash_fwd_kernel")]),
        "healthy": dict(kernels=[(0, 9800, "sm90_xmma_gemm_bf16")]),
    }[case]
    for r in (0, 1):
        write_rank(tmp_path, r, gpu_steps(**kernels))
    res = analyze(tmp_path)
    assert res["verdict"]["id"] == expect, res["verdict"]


def test_gpu_straggler_is_the_rank_the_others_wait_for(tmp_path):
    # rank 2's kernels run 3 ms longer; ranks 0, 1 and 3 sit 3 ms longer in the all-reduce waiting for it
    for r in range(4):
        slow = r == 2
        write_rank(tmp_path, r, gpu_steps(kernels=[(0, 8000 if slow else 5000, "gemm")],
                                          comm=[(8000 if slow else 5000, 1000 if slow else 4000, "ncclDevKernel_AllReduce")]),
                   world=4, host="slownode" if slow else None)
    res = analyze(tmp_path)
    s = res["across"]["straggler"]
    assert s["rank"] == 2 and s["host"] == "slownode" and s["bottleneck"] == "compute"
    assert s["waited_for_s"] == pytest.approx(0.003)
    assert res["verdict"]["id"] == "straggler" and "slownode" in res["verdict"]["finding"]


# -- real traces: 2 gloo ranks, DDP, torch.profiler ----------------------------------------------

@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    root = tmp_path_factory.mktemp("recorded")
    return {m: record(root / m, m) for m in ("slow-data", "slow-compute", "slow-loader", "tiny-ops")}


@pytest.mark.slow
@pytest.mark.parametrize("mode, part", [("slow-data", "data"), ("slow-compute", "compute")])
def test_real_slowed_rank_is_named_with_its_bottleneck(recorded, mode, part):
    res = invoke(["profile", recorded[mode], "--json"])
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["verdict"]["id"] == "straggler"
    assert data["across"]["straggler"]["rank"] == 1
    assert data["across"]["straggler"]["bottleneck"] == part
    assert data["across"]["straggler"]["host"] == "host-1"
    assert all(r["steps"] == 5 for r in data["ranks"])


@pytest.mark.slow
def test_real_slow_loader_is_data_bound(recorded):
    res = invoke(["profile", recorded["slow-loader"]])
    assert res.exit_code == 0, res.stderr
    assert "verdict: data-bound" in res.stdout
    data = analyze(recorded["slow-loader"])
    assert data["across"]["straggler"] is None
    for r in data["ranks"]:
        assert r["median"]["data_s"] > 0.25 * r["median"]["step_s"]


@pytest.mark.slow
def test_real_tiny_ops_are_host_bound(recorded):
    data = analyze(recorded["tiny-ops"])
    # on a shared 2-core box one rank may also be descheduled long enough to be named a straggler: host-bound must hold
    assert "host-bound" in [data["verdict"]["id"], *data["verdict"]["also"]], data["verdict"]
    assert data["ranks"][0]["granularity"]["ops_per_step"] > 1000


# -- bad input: one line, exit 2 --------------------------------------------------------------------

def test_run_dir_without_traces(tmp_path):
    (tmp_path / "config.yaml").write_text("run: {}\n")
    res = invoke(["profile", tmp_path])
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and "has no traces" in res.stderr and "--profile" in res.stderr


def test_traces_from_different_runs(tmp_path):
    write_rank(tmp_path, 0, gpu_steps(kernels=[(0, 9000, "gemm")]), run_id="run-a")
    write_rank(tmp_path, 1, gpu_steps(kernels=[(0, 9000, "gemm")]), run_id="run-b")
    res = invoke(["profile", tmp_path])
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and "different runs" in res.stderr and "run-a" in res.stderr and "run-b" in res.stderr


def test_truncated_trace_is_analysed_as_far_as_it_goes(tmp_path):
    write_rank(tmp_path, 0, gpu_steps(kernels=[(0, 9000, "gemm")]))
    write_rank(tmp_path, 1, gpu_steps(kernels=[(0, 9000, "gemm")]))
    p = tmp_path / "profile" / "rank-1.trace.json"
    text = p.read_text()
    p.write_text(text[: int(len(text) * 0.7)])  # cut inside the third step's events
    res = invoke(["profile", tmp_path, "--json"])
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and "damaged trace rank-1.trace.json" in res.stderr and "cut short" in res.stderr
    data = json.loads(res.stdout)  # what could be read is still analysed
    r1 = next(r for r in data["ranks"] if r["rank"] == 1)
    assert 1 <= r1["steps"] < 3 and "whole events read" in r1["damage"]
    assert next(r for r in data["ranks"] if r["rank"] == 0)["steps"] == 3


def test_not_a_directory(tmp_path):
    res = invoke(["profile", tmp_path / "nope"])
    assert res.exit_code == 2 and "is not a directory" in res.stderr and res.stderr.count("\n") == 1
