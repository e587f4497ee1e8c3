"""Model benchmarks: wiring to the training loop, the MAMF-relative MFU and energy per sample."""

import pytest
import torch

from rubin.bench import model
from rubin.bench.suites import Context


class FakeConfig:
    """Stands in for rubin.train.config.Config: only what the benchmark reads."""

    def __init__(self, overrides):
        self.overrides = overrides
        kv = dict(o.split("=", 1) for o in overrides)
        self.data = type("D", (), {"name": kv["data.name"], "path": None, "args": {}})()
        self.model = type("M", (), {"name": kv["model.name"], "args": {}})()


def fake_trainer(calls):
    def load_config(path, overrides, base=None):
        assert path is None
        return FakeConfig(overrides)

    def train(cfg, force, resume):
        calls.append(cfg.overrides)
        k = len(calls) % 2  # the two repeats of a workload differ, so the figure is a real summary of both
        sps = (150.0, 250.0)[k]
        return {"samples_per_s": sps, "tokens_per_s": sps * 64, "step_time_s": {"median": (0.06, 0.10)[k], "p90": 0.09},
                "peak_mem_bytes": (654321, 123456)[k], "mfu": (0.3, 0.5)[k], "world_size": 1, "steps": 12}

    return lambda: (load_config, train)


@pytest.fixture
def ctx(tmp_path):
    c = Context(device=torch.device("cpu"), devices=[torch.device("cpu")], gpu_count=0, workdir=tmp_path)
    c.matmul_summary = {"cpu": {"fp32": {"mamf_tflops": 0.1}}}
    return c


def test_runs_each_workload_through_the_training_loop_with_fixed_configs(monkeypatch, ctx):
    calls = []
    monkeypatch.setattr(model, "_trainer", fake_trainer(calls))
    monkeypatch.setattr(model, "_flops_per_sample", lambda cfg: 2.5e8)
    params = {"workloads": ["vit", "gpt124m"], "precisions": ["fp32"], "steps": 12, "log_every": 3, "repeats": 2, "extra": []}
    out = model.run(params, ctx)
    assert len(calls) == 4  # 2 workloads x 2 repeats
    assert "model.name=gpt" in calls[-1] and "run.max_steps=12" in calls[-1] and "precision=fp32" in calls[-1]
    row = out["rows"][1]
    assert row["workload"] == "gpt124m" and row["samples_per_s"]["n"] == 2
    assert (row["samples_per_s"]["min"], row["samples_per_s"]["median"], row["samples_per_s"]["max"]) == (150.0, 200.0, 250.0)
    assert row["tokens_per_s"]["median"] == 200.0 * 64
    assert row["step_time_median_s"]["median"] == pytest.approx(0.08) and row["step_time_p90_s"]["median"] == 0.09
    assert row["peak_mem_bytes"] == 654321  # the peak over the repeats, not the first or the last
    assert row["mfu"]["median"] == pytest.approx(0.4)
    # MAMF-relative MFU: 2.5e8 FLOPs/sample x 200 samples/s = 0.05 TFLOPS over a measured 0.1 ceiling.
    assert row["achieved_tflops_per_device"] == pytest.approx(0.05)
    assert row["mamf_mfu"] == pytest.approx(0.5)
    assert row["energy_j_per_sample"]["median"] is None  # no NVML power on CPU


def test_energy_per_sample_from_sampled_power(monkeypatch, ctx):
    monkeypatch.setattr(model, "_trainer", fake_trainer([]))
    monkeypatch.setattr(model, "_flops_per_sample", lambda cfg: None)

    class Power:
        def __init__(self, indices):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def mean_watts(self):
            return 500.0

    monkeypatch.setattr(model, "PowerSampler", Power)
    out = model.run({"workloads": ["vit"], "precisions": ["fp32"], "steps": 4, "log_every": 2, "repeats": 1}, ctx)
    assert out["rows"][0]["energy_j_per_sample"]["median"] == pytest.approx(500.0 / 250.0)  # W / (samples/s) of that run
    assert out["rows"][0]["mamf_mfu"] is None  # no FLOPs known: no MFU, never a guess


def test_unknown_workload_is_a_usage_error(ctx):
    from rubin.errors import UsageError

    with pytest.raises(UsageError, match=r"model.workloads='bert'"):
        model.overrides("bert", "bf16", {"steps": 1, "log_every": 1}, "/x", gpu=False)


def test_power_sampler_averages_nvml_readings(monkeypatch):
    import itertools
    import time

    from rubin.platform import device as dev

    # Two boards: 100 W and 250 W; every third reading of board 1 fails (None) and that sample is dropped.
    reads = {0: itertools.repeat(100.0), 1: itertools.cycle([250.0, 250.0, None])}
    monkeypatch.setattr(dev, "power_watts", lambda i: next(reads[i]))
    with model.PowerSampler([0, 1], interval_s=0.005) as p:
        deadline = time.monotonic() + 60
        while len(p.watts) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(p.watts) >= 4
    assert set(p.watts) == {350.0}  # the node's power is the sum over its boards; a failed reading is not a 0
    assert p.mean_watts() == 350.0
    assert model.PowerSampler([]).mean_watts() is None


@pytest.mark.slow
def test_real_training_loop_on_cpu(ctx):
    params = {"workloads": ["gpt124m"], "precisions": ["fp32"], "steps": 6, "log_every": 2, "repeats": 1, "extra": []}
    out = model.run(params, ctx)
    row = out["rows"][0]
    assert row["steps"] == 6 and row["samples_per_s"]["median"] > 0 and row["tokens_per_s"]["median"] > 0
    assert row["flops_per_sample"] and row["mamf_mfu"] is not None


def test_logged_intervals_are_the_trials_and_the_first_is_dropped(monkeypatch, ctx):
    from pathlib import Path

    from rubin.runs import RunDir

    def load_config(path, overrides, base=None):
        return FakeConfig(overrides)

    def train(cfg, force, resume):
        run_dir = dict(o.split("=", 1) for o in cfg.overrides)["run.dir"]
        run = RunDir(run_dir)
        Path(run_dir).mkdir(parents=True)
        for sps in (5.0, 100.0, 110.0, 90.0, 105.0, 95.0, 100.0):  # 5.0: the warm-up interval
            run.log_metrics({"samples_per_s": sps, "time": {"step_s": 16 / sps}})
        run.close()
        return {"samples_per_s": 100.0, "step_time_s": {"median": 0.16, "p90": 0.17}, "world_size": 1, "steps": 14}

    monkeypatch.setattr(model, "_trainer", lambda: (load_config, train))
    monkeypatch.setattr(model, "_flops_per_sample", lambda cfg: None)
    out = model.run({"workloads": ["vit"], "precisions": ["fp32"], "steps": 14, "log_every": 2, "repeats": 1}, ctx)
    row = out["rows"][0]
    assert row["trials"] == {"runs": 1, "intervals": 6}
    assert row["samples_per_s"]["min"] == 90.0 and row["samples_per_s"]["median"] == 100.0
    assert row["step_time_median_s"]["median"] == pytest.approx(0.16)
