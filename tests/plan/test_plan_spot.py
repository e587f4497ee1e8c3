"""Checkpoint intervals (Young 1974, Daly 2006) and the Monte Carlo against the closed forms."""

import math

import pytest

from rubin.plan import montecarlo, spot

MIN, HOUR = 60.0, 3600.0


def test_young_closed_form():
    assert spot.young_interval(300, 24 * HOUR) == pytest.approx(math.sqrt(2 * 300 * 24 * HOUR))


@pytest.mark.parametrize("mtbf,published_min,digits", [(24 * HOUR, 117, 0), (6 * HOUR, 57, 0), (15 * MIN, 9.1, 1)])
def test_daly_against_his_published_examples(mtbf, published_min, digits):
    # Daly 2006: delta = 5 min, R = 10 min, T_s = 500 h; optimum 117, 57 and 9.1 min (as printed)
    assert round(spot.daly_interval(5 * MIN, mtbf) / MIN, digits) == published_min


def test_daly_interval_is_mtbf_when_checkpoints_take_longer_than_2m():
    assert spot.daly_interval(3 * HOUR, 1 * HOUR) == 1 * HOUR


def test_wall_time_without_failures_tends_to_work_plus_checkpoints():
    wall = spot.daly_wall_time(100 * HOUR, 1 * HOUR, 60, mtbf_s=1e12, restart_s=0)
    assert wall == pytest.approx(100 * HOUR + 100 * 60, rel=1e-6)


@pytest.mark.parametrize("mtbf", [24 * HOUR, 6 * HOUR, 15 * MIN])
def test_monte_carlo_mean_matches_daly_within_its_ci(mtbf):
    c, r, ts = 5 * MIN, 10 * MIN, 500 * HOUR
    tau = ts / (ts // spot.daly_interval(c, mtbf))  # a whole number of segments, as in Daly's T_w
    closed = spot.daly_wall_time(ts, tau, c, mtbf, r)
    mc = montecarlo.simulate(ts, mtbf_s=mtbf, checkpoint_s=c, restart_s=r, interval_s=tau, runs=4000, seed=0)
    assert abs(mc["mean_s"] - closed) <= mc["ci95_s"]
    assert mc["p90_s"] > mc["p50_s"]


def test_monte_carlo_emergency_checkpoint_matches_closed_form():
    ts, m, save, r = 200 * HOUR, 5 * HOUR, 20.0, 600.0
    closed = spot.emergency_wall_time(ts, save, m, r)
    mc = montecarlo.simulate(ts, mtbf_s=m, checkpoint_s=300, restart_s=r, interval_s=None,
                             emergency_save_s=save, runs=4000, seed=2)
    assert abs(mc["mean_s"] - closed) <= mc["ci95_s"]
    # evictions during the solve are Poisson with mean T_s / M, plus those that hit restarts
    assert mc["mean_preemptions"] == pytest.approx(ts / m * math.exp(r / m), rel=0.05)


def test_job_hazard_is_node_hazard_times_nodes():
    one = spot.spot_plan(10 * HOUR, hazard_per_hour=0.01, nodes=1, checkpoint_s=300, emergency_save_s=None,
                         notice_s=30, restart_s=300)
    many = spot.spot_plan(10 * HOUR, hazard_per_hour=0.01, nodes=16, checkpoint_s=300, emergency_save_s=None,
                          notice_s=30, restart_s=300)
    assert many["job_hazard_per_hour"] == pytest.approx(0.16)
    assert many["mtbf_hours"] == pytest.approx(one["mtbf_hours"] / 16)
    assert many["expected_preemptions"] > 10 * one["expected_preemptions"]


def test_emergency_checkpoint_in_the_notice_loses_no_work():
    plan = spot.spot_plan(10 * HOUR, hazard_per_hour=0.1, nodes=1, checkpoint_s=300, emergency_save_s=20,
                          notice_s=30, restart_s=300)
    assert plan["emergency_checkpoint_fits"] is True
    assert plan["lost_work_per_preemption_s"] == 0
    assert plan["checkpoint_interval_s"] is None


def test_lost_work_is_about_half_a_segment_when_failures_are_rare():
    assert spot.lost_work_per_failure(3600, 1e9) == pytest.approx(1800, rel=1e-3)
