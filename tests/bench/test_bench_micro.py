"""Micro benchmarks on CPU with small sizes: matmul, memory copy, host copies, launch, io."""

import pytest
import torch

from rubin.bench import kernel_launch as launch
from rubin.bench import matmul, memory, storage
from rubin.bench.suites import Context


@pytest.fixture
def ctx(tmp_path):
    return Context(device=torch.device("cpu"), devices=[torch.device("cpu")], gpu_count=0, workdir=tmp_path)


def test_matmul_rows_and_the_mamf_summary(ctx):
    params = {"dtypes": ["fp32", "tf32", "fp8"], "shapes": [[64, 32, 16], [128, 128, 128]], "warmup": 1, "trials": 6,
              "flush_bytes": 2**20}
    out = matmul.run(params, ctx)
    rows = out["rows"]
    assert [(r["dtype"], r["m"], r["n"], r["k"]) for r in rows] == [("fp32", 64, 32, 16), ("fp32", 128, 128, 128)]
    for r in rows:
        # TFLOPS = 2mnk / time, per sample, so the medians agree.
        assert r["tflops"]["median"] == pytest.approx(2 * r["m"] * r["n"] * r["k"] / (r["time_us"]["median"] * 1e-6) / 1e12)
        assert r["pct_of_spec"] is None  # a CPU has no catalog row: no % of spec, never a guess
    s = out["summary"]["cpu"]["fp32"]
    assert s["mamf_tflops"] == max(r["tflops"]["median"] for r in rows)
    assert s["max_sample_tflops"] >= s["mamf_tflops"]
    # tf32 and fp8 are GPU features: recorded as skipped with the reason, not silently dropped.
    assert {x["dtype"] for x in out["skipped"]} == {"tf32", "fp8"}
    assert all(x["reason"] for x in out["skipped"])


def test_matmul_unknown_dtype_is_a_usage_error(ctx):
    from rubin.errors import UsageError

    with pytest.raises(UsageError, match=r"matmul.dtypes='int4'"):
        matmul.run({"dtypes": ["int4"], "shapes": [[8, 8, 8]], "warmup": 0, "trials": 1}, ctx)


def test_membw_counts_bytes_read_plus_written(ctx):
    out = memory.membw_run({"bytes": [2**20], "warmup": 1, "trials": 6, "iters": 2}, ctx)
    r = out["rows"][0]
    assert r["gbps"]["median"] == pytest.approx(2 * 2**20 / (r["time_us"]["median"] * 1e-6) / 1e9)


def test_h2d_without_gpu_runs_host_copies_and_says_so(ctx):
    out = memory.h2d_run({"bytes": [2**20], "warmup": 1, "trials": 3, "iters": 1}, ctx)
    assert {(r["op"], r["memory"]) for r in out["rows"]} == {("h2d", "pageable"), ("d2h", "pageable")}
    assert any("not a PCIe figure" in n for n in out["notes"])


def test_launch_latency_rows(ctx):
    out = launch.run({"kernels": 20, "warmup": 2, "trials": 6}, ctx)
    r = out["rows"][0]
    assert r["kernels"] == 20 and r["wall_us"]["median"] > 0 and r["event_us"]["n"] == 6


def test_io_writes_and_reads_in_the_given_dir_and_cleans_up(ctx, tmp_path):
    params = storage.defaults(True, ctx)
    params.update(dir=str(tmp_path), bytes=2**20, chunk_bytes=2**18, trials=3)
    params["dataloader"].update(samples=64, batch_size=16, batches=2, trials=3)
    out = storage.run(params, ctx)
    ops = {r["op"]: r for r in out["rows"]}
    assert set(ops) == {"disk_write", "disk_read", "dataloader"}
    assert ops["disk_write"]["dir"] == str(tmp_path) and ops["disk_write"]["bytes"] == 2**20
    assert "fsync" in out["method"]["write"]
    assert list(tmp_path.iterdir()) == []  # the benchmark files are gone


def test_io_missing_dir_is_a_usage_error(ctx, tmp_path):
    from rubin.errors import UsageError

    params = storage.defaults(True, ctx)
    params["dir"] = str(tmp_path / "nope")
    with pytest.raises(UsageError, match=r"io.dir="):
        storage.run(params, ctx)


def test_dataloader_reads_a_rubin_train_dataset_by_name(ctx):
    rows, _ = storage.dataloader({"dataset": "synthetic_images", "args": {"num_samples": 64, "image_size": 8},
                                  "batch_size": 16, "num_workers": 0, "batches": 2, "trials": 3}, ctx)
    assert rows[0]["dataset"] == "synthetic_images" and rows[0]["samples_per_s"]["n"] == 3


def test_dataloader_unknown_dataset_lists_the_choices(ctx):
    from rubin.errors import UsageError

    with pytest.raises(UsageError, match=r"io.dataloader.dataset='imagenet'.*synthetic_images"):
        storage.dataloader({"dataset": "imagenet", "batch_size": 1, "num_workers": 0, "batches": 1, "trials": 1}, ctx)


def test_matmul_rows_carry_the_clocks_and_the_headline_has_burst_and_sustained(ctx):
    import copy
    import json
    from pathlib import Path

    from rubin.platform import nvml, nvml_fake
    from rubin.platform.nvml_watch import ClockWatch

    rec = json.loads((Path(__file__).resolve().parents[1] / "fixtures/doctor/nvml/h200_recorded.json").read_text())
    data = copy.deepcopy(rec)
    # The recorded H200 under a power cap: 1755 MHz of 1980, sw_power_cap set.
    data["devices"][0].update({"nvmlDeviceGetClockInfo:1": 1755, "nvmlDeviceGetCurrentClocksEventReasons": 0x4,
                               "nvmlDeviceGetPowerUsage": 699_000})
    params = {"dtypes": ["fp32"], "shapes": [[64, 64, 64], [96, 96, 96]], "warmup": 1, "trials": 4, "flush_bytes": 2**20,
              "headline": {"dtype": "fp32", "shape": [96, 96, 96], "sustained_s": 0.05}}
    try:
        nvml.set_for_tests(nvml_fake.fake_nvml(data))
        out = matmul.run(params, ctx, watch_factory=lambda: ClockWatch(0, interval_s=0.001))
    finally:
        nvml.reset()
    for r in out["rows"]:
        assert r["nvml"]["samples"] >= 1
        assert r["nvml"]["sm_clock_mhz"]["median"] == 1755 and r["nvml"]["capped"] is True
    s = out["summary"]["cpu"]["fp32"]
    assert s["capped_shapes"] == [[64, 64, 64], [96, 96, 96]]
    h = s["headline"]
    assert h["shape"] == [96, 96, 96] and h["burst"]["tflops"] > 0 and h["sustained"]["tflops"] > 0
    assert h["sustained_over_burst"] == pytest.approx(h["sustained"]["tflops"] / h["burst"]["tflops"])
    assert h["sustained"]["nvml"]["power_w"]["median"] == 699.0
    # The table shows the clock beside each figure and flags it.
    from rich.console import Console

    from rubin.bench import render

    doc = {"benchmarks": {"matmul": out}, "device": {"name": "cpu", "count": 1, "type": "cpu"}, "spec": None,
           "spec_match": {"reason": "no GPU"}, "preset": "quick", "wall_s": 1.0}
    con = Console(width=200, record=True)
    for t in render.tables(doc):
        con.print(t)
    text = con.export_text()
    assert "CAPPED (sw_power_cap" in text and "1755" in text and "sustained" in text


def test_matmul_on_cpu_has_no_clocks(ctx):
    out = matmul.run({"dtypes": ["fp32"], "shapes": [[32, 32, 32]], "warmup": 1, "trials": 3, "flush_bytes": 2**20}, ctx)
    assert out["rows"][0]["nvml"] is None and out["summary"]["cpu"]["fp32"]["capped_shapes"] == []
