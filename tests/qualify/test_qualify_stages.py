"""The plan-cost stage of qualify: it prices a GPU run and refuses to price a CPU one as GPU hours."""

import json

import pytest
from utils import ROOT

from rubin.qualify.stages import Context, plan_cost

PRICES = str(ROOT / "examples" / "prices.example.yaml")


def _ctx(tmp_path, device: str, gpu: str | None) -> Context:
    run = tmp_path / "runs" / "seed-0"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"status": "completed", "device": device, "world_size": 1,
                                                  "samples_per_s": 2000.0, "steps": 100}))
    (run / "env.json").write_text(json.dumps({"gpu": {"names": [gpu] if gpu else []}}))
    return Context(out=tmp_path, quick=True, seeds=1, baseline=None, workload=None, prices=PRICES,
                   work=3.6e7, keep_going=False, runs=[run])


def test_a_gpu_run_is_priced_per_instance(tmp_path):
    ctx = _ctx(tmp_path, "cuda:0", "NVIDIA H200")
    status, detail = plan_cost(ctx)
    assert status == "ok", detail
    doc = json.loads(ctx.files["plan-cost"].read_text())
    best = doc["options"][0]
    assert detail.startswith(f"best: {best['name']}") and best["on_demand_cost"] > 0
    # The H200 option runs on the measured GPU: 8 of them at the measured 2000 samples/s each, scaled by the
    # stated efficiency, billed at its 100/h on-demand price for the hours that takes.
    h200 = next(o for o in doc["options"] if o["gpu"] == "H200")
    assert h200["throughput"] == pytest.approx(2000.0 * 8 * h200["scaling_efficiency"])
    assert h200["hours"] >= 3.6e7 / h200["throughput"] / 3600
    assert h200["on_demand_cost"] == pytest.approx(100.0 * h200["hours"])


def test_a_cpu_run_is_not_priced_as_gpu_hours(tmp_path):
    ctx = _ctx(tmp_path, "cpu", None)
    status, detail = plan_cost(ctx)
    assert status == "skipped" and "CPU" in detail
    assert "plan-cost" not in ctx.files and not (tmp_path / "plan-cost.json").exists()
