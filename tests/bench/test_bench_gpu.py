"""The CUDA paths of the benchmarks (skipped without a GPU; scripts/gpu-check.sh runs them)."""

from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture
def ctx(tmp_path):
    from rubin.bench import suites

    return suites.make_context("cuda", quick=True, workdir=Path(tmp_path))


def test_context_sees_every_gpu_and_matches_the_catalog(ctx):
    import torch

    assert ctx.gpu_count == torch.cuda.device_count() and ctx.device.type == "cuda"
    name = torch.cuda.get_device_name(0)
    spec = ctx.spec_for(ctx.device)
    if spec is not None:  # a known GPU: the row's capability agrees with the device
        major, minor = torch.cuda.get_device_capability(0)
        assert spec.compute_capability == f"{major}.{minor}", name


def test_bf16_matmul_reports_a_plausible_fraction_of_spec(ctx):
    from rubin.bench import matmul

    out = matmul.run({"dtypes": ["bf16", "tf32", "fp8"], "shapes": [[4096, 4096, 4096]], "warmup": 5, "trials": 10,
                      "flush_bytes": None}, ctx)
    row = next(r for r in out["rows"] if r["dtype"] == "bf16" and r["device"] == "cuda:0")
    assert row["tflops"]["median"] > 1.0
    if ctx.spec_for(ctx.device) is not None:
        # Measured above the dense peak would mean a wrong (sparse) catalog figure.
        assert 1.0 < row["pct_of_spec"] < 105.0
    import torch

    if torch.cuda.get_device_capability(0) >= (8, 9):
        assert any(r["dtype"] == "fp8" for r in out["rows"])


def test_device_copy_and_host_copies(ctx):
    from rubin.bench import memory

    mb = memory.membw_run({"bytes": [256 * 2**20], "warmup": 2, "trials": 6, "iters": 3}, ctx)
    r = mb["rows"][0]
    assert r["gbps"]["median"] > 50
    if ctx.spec_for(ctx.device) is not None:
        assert r["pct_of_spec"] < 105.0
    h = memory.h2d_run({"bytes": [64 * 2**20], "warmup": 1, "trials": 6, "iters": 2}, ctx)
    assert {(x["op"], x["memory"]) for x in h["rows"] if x["device"] == "cuda:0"} == {
        ("h2d", "pinned"), ("h2d", "pageable"), ("d2h", "pinned"), ("d2h", "pageable")}


def test_launch_latency_has_device_and_host_figures(ctx):
    from rubin.bench import kernel_launch as launch

    out = launch.run({"kernels": 100, "warmup": 10, "trials": 6}, ctx)
    r = out["rows"][0]
    assert r["event_us"]["median"] > 0 and r["wall_us"]["median"] > 0


@pytest.mark.slow
def test_nccl_collectives_over_local_gpus(ctx):
    import torch

    from rubin.bench import collectives

    if torch.cuda.device_count() < 2:
        pytest.skip("NCCL collectives need at least 2 GPUs")
    out = collectives.run({"ops": ["all_reduce", "all_gather"], "sizes": [2**20, 2**24], "ranks": torch.cuda.device_count(),
                           "warmup": 2, "trials": 5, "iters": 5, "dtype": "float32", "timeout_s": 300}, ctx)
    assert out["method"]["backend"] == "nccl"
    assert all(r["verified"] for r in out["rows"])
