"""Time and cost per option: on demand by hand, spot break-even, ranking, price-file errors."""

import math

import pytest
from utils import ROOT

from rubin.errors import UsageError
from rubin.plan import prices
from rubin.plan.cost import CostRequest, efficiency, plan
from rubin.plan.throughput import by_hand, from_bench, from_summary

FIX = ROOT / "tests" / "fixtures" / "plan"


def _req(**kw):
    base = dict(throughput=by_hand(100.0, "samples", 1, "H100-SXM"), work=8 * 100.0 * 36000, unit="samples",
                prices=prices.load(FIX / "prices.yaml"), checkpoint_s=120, scaling_efficiency=1.0, mc_runs=1000)
    base.update(kw)
    return CostRequest(**base)


def _opt(res, name):
    return next(o for o in res["options"] if o["name"] == name)


def test_on_demand_time_and_cost_by_hand():
    res = plan(_req())
    o = _opt(res, "slow-cheap")
    # 8 GPUs x 100 samples/s: 36000 s of work + the final 120 s save, at 10 $/h
    assert o["hours"] == pytest.approx((36000 + 120) / 3600)
    assert o["on_demand_cost"] == pytest.approx(10 * (36000 + 120) / 3600)


def test_spot_is_cheaper_here_and_break_even_hazard_equalizes_cost():
    res = plan(_req())
    s = _opt(res, "slow-cheap")["spot"]
    assert s["expected_cost"] < _opt(res, "slow-cheap")["on_demand_cost"]
    assert s["expected_preemptions"] == pytest.approx(s["expected_hours"] * 0.01, rel=0.1)
    # at the break-even hazard, spot's expected cost equals on demand
    be = s["break_even_hazard_per_hour"]
    at = prices.load(FIX / "prices.yaml")
    at.instances[0].hazard_per_hour = be
    s_be = _opt(plan(_req(prices=at)), "slow-cheap")["spot"]
    assert s_be["expected_cost"] == pytest.approx(_opt(res, "slow-cheap")["on_demand_cost"], rel=1e-3)


def test_emergency_checkpoint_within_notice_means_no_lost_work():
    res = plan(_req(emergency_save_s=20))
    s = _opt(res, "slow-cheap")["spot"]
    assert s["emergency_checkpoint_fits"] and s["lost_work_per_preemption_s"] == 0


def test_rank_by_cost_and_by_time():
    by_cost = plan(_req())
    assert _opt(by_cost, "slow-cheap")["rank"] == 1
    faster = prices.load(FIX / "prices.yaml")
    faster.instances[1].gpu = "GB300"  # projected faster: ranks first by time
    by_time = plan(_req(prices=faster, rank_by="time", mfu=0.5))
    assert _opt(by_time, "fast-dear")["rank"] == 1
    assert _opt(by_time, "fast-dear")["projection"]["kind"] == "projection"


def test_deadline_excludes_options_that_miss_it():
    res = plan(_req(rank_by="deadline", deadline_hours=5))  # every option needs 10 h
    assert not any(o["meets_deadline"] for o in res["options"])
    res = plan(_req(rank_by="deadline", deadline_hours=11))
    assert _opt(res, "slow-cheap")["meets_deadline"]


def test_scaling_efficiency_per_doubling_and_measured_points():
    r = _req(scaling_efficiency=0.9)
    assert efficiency(8, r) == pytest.approx(0.9**3)
    r = _req(scaling_points={8: 0.8})
    assert efficiency(8, r) == pytest.approx(0.8)
    assert efficiency(4, r) == pytest.approx(1 - 0.2 * 2 / 3)  # 4 GPUs: 2/3 of the way from 1 to 8 in log2


@pytest.mark.parametrize("fixture,match", [
    ("prices_negative_hazard.yaml", r"hazard_per_hour=-0.5 is not valid.*positive"),
    ("prices_zero_price.yaml", r"on_demand_per_hour=0 is not valid.*positive"),
    ("prices_unknown_key.yaml", r"unknown key 'instances.0.provison_s' \(did you mean 'provision_s'\?\)"),
    ("prices_unknown_gpu.yaml", r"gpu='H20O' is not in the spec catalog \(did you mean 'H200'\?\)"),
])
def test_bad_price_files_are_one_line_usage_errors(fixture, match):
    with pytest.raises(UsageError, match=match):
        prices.load(FIX / fixture)


def test_bench_file_of_the_wrong_schema_is_rejected():
    with pytest.raises(UsageError, match="schema_version=7 is not valid"):
        from_bench(FIX / "bench_wrong_schema.json")
    with pytest.raises(UsageError, match="kind=None is not valid"):
        from_bench(FIX / "bench_no_schema.json")


def test_bench_results_model_row_and_busbw():
    from rubin.plan.throughput import busbw_from_bench

    t = from_bench(FIX / "bench_h100.json")
    assert (t.value, t.unit, t.gpu, t.mfu, t.tokens_per_sample) == (40960.0, "tokens", "H100-SXM", 0.42, 1024.0)
    assert busbw_from_bench(FIX / "bench_h100.json") == 334.0  # the largest all-reduce size
    with pytest.raises(UsageError, match="did you mean 'gpt'"):
        from_bench(FIX / "bench_h100.json", workload="gtp")


def test_run_summary_throughput(tmp_path):
    import json

    (tmp_path / "summary.json").write_text(json.dumps({"status": "completed", "samples_per_s": 50.0,
                                                       "tokens_per_s": 51200.0, "world_size": 2, "mfu": 0.3}))
    t = from_summary(tmp_path)
    assert (t.value, t.unit, t.gpus, t.tokens_per_sample, t.mfu) == (51200.0, "tokens", 2, 1024.0, 0.3)


def test_zero_work_is_rejected():
    with pytest.raises(UsageError, match="work=0"):
        plan(_req(work=0))


def _poisson_quantile(mean: float, q: float) -> int:
    """Smallest k with P(N <= k) >= q for N ~ Poisson(mean), from the pmf (independent of numpy)."""
    k, pmf, cdf = 0, math.exp(-mean), math.exp(-mean)
    while cdf < q:
        k += 1
        pmf *= mean / k
        cdf += pmf
    return k


def test_p90_of_spot_with_emergency_saves_is_the_poisson_quantile(tmp_path):
    # 10 h of work, 0.5 evictions per node-hour, every eviction costs one 60 s emergency save (it fits the
    # 600 s notice) and nothing else: wall = 36000 s + N * 60 s with N ~ Poisson(5), so P90 = 36000 + q90 * 60
    (tmp_path / "p.yaml").write_text(
        "instances:\n  - {name: one, gpus: 8, gpu: H100-SXM, on_demand_per_hour: 10.0, spot_per_hour: 4.0,\n"
        "     notice_s: 600, hazard_per_hour: 0.5, provision_s: 0, restart_s: 0}\n")
    res = plan(_req(prices=prices.load(tmp_path / "p.yaml"), emergency_save_s=60, mc_runs=20000))
    s = _opt(res, "one")["spot"]
    assert s["emergency_checkpoint_fits"] is True
    q90 = _poisson_quantile(0.5 * 10, 0.9)
    assert q90 == 8
    assert s["p90_hours"] == pytest.approx((36000 + q90 * 60) / 3600)
    assert s["p90_cost"] == pytest.approx(4.0 * (36000 + q90 * 60) / 3600)
    assert math.isfinite(s["p90_hours"])
