"""Time and cost per instance option, on demand and on spot, and their ranking.

total = price x time + risk and delay cost: on demand, time is provisioning plus the work at the
measured (or projected) rate; on spot, time adds checkpoints, lost work and restarts under the
eviction hazard (``rubin.plan.spot``), with a P90 from Monte Carlo (``rubin.plan.montecarlo``).
A delay cost per hour of wall time, when given, turns a slower option's time into money.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rubin.errors import UsageError, bad_value
from rubin.plan import montecarlo, spot
from rubin.plan.prices import Instance, PriceList
from rubin.plan.projection import project
from rubin.plan.throughput import Throughput

SCHEMA_VERSION = 1
RANK_BY = ("cost", "time", "deadline")


@dataclass
class CostRequest:
    throughput: Throughput
    work: float
    unit: str
    prices: PriceList
    checkpoint_s: float = 60.0
    emergency_save_s: float | None = None
    nodes: int | None = None
    gpus: int | None = None
    scaling_efficiency: float = 0.95  # per doubling of GPUs beyond the measured count
    scaling_points: dict[int, float] = field(default_factory=dict)  # measured: GPUs -> efficiency
    rank_by: str = "cost"
    deadline_hours: float | None = None
    delay_cost_per_hour: float = 0.0
    mc_runs: int = 4000
    seed: int = 0
    dtype: str = "bf16"
    mfu: float | None = None

    def validate(self) -> None:
        if not self.work > 0:
            raise bad_value("work", self.work, "a positive amount of work (tokens or samples)", "e.g. --work 1e12 --unit tokens")
        if not self.checkpoint_s > 0:
            raise bad_value("checkpoint-seconds", self.checkpoint_s,
                            "a positive save time in seconds (measure it: rubin train logs ckpt_s)")
        if self.emergency_save_s is not None and not self.emergency_save_s > 0:
            raise bad_value("emergency-checkpoint-seconds", self.emergency_save_s, "a positive save time in seconds")
        if not 0 < self.scaling_efficiency <= 1:
            raise bad_value("scaling-efficiency", self.scaling_efficiency, "a fraction in (0, 1] per doubling of GPUs")
        for g, e in self.scaling_points.items():
            if g <= 0 or not 0 < e <= 1:
                raise bad_value("scaling", f"{g}={e}", "GPUS=EFFICIENCY with GPUS > 0 and EFFICIENCY in (0, 1]")
        if self.rank_by not in RANK_BY:
            raise bad_value("rank-by", self.rank_by, f"one of {', '.join(RANK_BY)}")
        if self.rank_by == "deadline" and not (self.deadline_hours and self.deadline_hours > 0):
            raise bad_value("deadline-hours", self.deadline_hours, "a positive number of hours with --rank-by deadline")
        if self.delay_cost_per_hour < 0:
            raise bad_value("delay-cost-per-hour", self.delay_cost_per_hour, "zero or more per hour")
        if self.nodes is not None and self.nodes <= 0:
            raise bad_value("nodes", self.nodes, "a positive integer")
        if self.gpus is not None and self.gpus <= 0:
            raise bad_value("gpus", self.gpus, "a positive integer")
        if not 100 <= self.mc_runs <= 1_000_000:
            raise bad_value("mc-runs", self.mc_runs, "between 100 and 1000000")


def efficiency(gpus: int, req: CostRequest) -> float:
    """Scaling efficiency at ``gpus``: measured points (log-interpolated) or a per-doubling factor."""
    pts = dict(sorted({1: 1.0, **req.scaling_points}.items()))
    if len(pts) > 1:
        xs = sorted(pts)
        if gpus >= xs[-1]:  # beyond the last point, continue at the per-doubling factor
            return pts[xs[-1]] * req.scaling_efficiency ** math.log2(gpus / xs[-1])
        for lo, hi in zip(xs, xs[1:]):
            if lo <= gpus <= hi:
                t = (math.log2(gpus) - math.log2(lo)) / (math.log2(hi) - math.log2(lo)) if hi > lo else 0
                return pts[lo] + t * (pts[hi] - pts[lo])
    return req.scaling_efficiency ** math.log2(max(gpus, 1))


def _rate(inst: Instance, gpus: int, req: CostRequest, notes: list[str]) -> tuple[dict, dict | None]:
    """Job rate (units/s) on ``gpus`` of this instance: low, mid, high; and the projection if any."""
    tp = req.throughput
    scale = gpus * efficiency(gpus, req) / efficiency(tp.gpus, req)
    per = tp.per_gpu if tp.unit == req.unit else tp.in_unit(req.unit) / tp.gpus
    if tp.gpu is None:
        msg = "the measured GPU is unknown: the throughput is assumed to hold on every GPU type (pass --measured-gpu to project)"
        if msg not in notes:
            notes.append(msg)
        return {"low": per * scale, "mid": per * scale, "high": per * scale}, None
    if tp.gpu == inst.gpu:
        return {"low": per * scale, "mid": per * scale, "high": per * scale}, None
    proj = project(tp, inst.gpu, dtype=req.dtype, mfu=req.mfu)
    s = proj["speedup"]
    return {k: per * scale * s[k] for k in ("low", "mid", "high")}, proj


def _spot_cost(inst: Instance, nodes: int, solve_s: float, req: CostRequest, hazard: float) -> tuple[dict, float]:
    sp = spot.spot_plan(solve_s, hazard_per_hour=hazard, nodes=nodes, checkpoint_s=req.checkpoint_s,
                        emergency_save_s=req.emergency_save_s, notice_s=inst.notice_s,
                        restart_s=inst.restart_s + inst.provision_s)
    hours = sp["expected_compute_hours"] + inst.provision_s / 3600.0
    return sp, hours


def _break_even(inst: Instance, nodes: int, solve_s: float, req: CostRequest, od_cost: float) -> float:
    """Node hazard (per hour) at which spot's expected cost equals on demand; 0 if spot never pays."""
    def cost(h):
        hours = _spot_cost(inst, nodes, solve_s, req, h)[1]
        return (nodes * inst.spot_per_hour + req.delay_cost_per_hour) * hours

    lo, hi = 1e-9, 1e3
    if cost(lo) >= od_cost:
        return 0.0
    if cost(hi) <= od_cost:
        return hi
    for _ in range(80):  # bisection in log space
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if cost(mid) < od_cost else (lo, mid)
    return math.sqrt(lo * hi)


def option(inst: Instance, req: CostRequest, notes: list[str]) -> dict:
    nodes = req.nodes or (math.ceil(req.gpus / inst.gpus) if req.gpus else 1)
    gpus = nodes * inst.gpus
    rate, proj = _rate(inst, gpus, req, notes)
    solve_s = req.work / rate["mid"]
    # on demand also ends with one checkpoint save (the spot model's last segment does too)
    od_hours = (inst.provision_s + solve_s + req.checkpoint_s) / 3600.0
    od_cost = nodes * inst.on_demand_per_hour * od_hours
    row = {
        "name": inst.name,
        "gpu": inst.gpu,
        "gpus_per_node": inst.gpus,
        "nodes": nodes,
        "gpus": gpus,
        "throughput": rate["mid"],
        "throughput_range": rate,
        "unit": req.unit,
        "scaling_efficiency": efficiency(gpus, req) / efficiency(req.throughput.gpus, req),
        "projection": proj,
        "hours": od_hours,
        # fastest and slowest end of the throughput range (a projection); equal when measured
        "hours_range": {"low": (inst.provision_s + req.checkpoint_s + req.work / rate["high"]) / 3600.0,
                        "high": (inst.provision_s + req.checkpoint_s + req.work / rate["low"]) / 3600.0},
        "on_demand_cost": od_cost,
        "on_demand_tco": od_cost + req.delay_cost_per_hour * od_hours,
        "spot": None,
    }
    if inst.spot_per_hour is not None:
        sp, hours = _spot_cost(inst, nodes, solve_s, req, inst.hazard_per_hour)
        mc = montecarlo.simulate(solve_s, mtbf_s=sp["mtbf_hours"] * 3600.0, checkpoint_s=req.checkpoint_s,
                                 restart_s=inst.restart_s + inst.provision_s,
                                 interval_s=None if sp["checkpoint_interval_s"] is None else min(sp["checkpoint_interval_s"], solve_s),
                                 emergency_save_s=req.emergency_save_s or req.checkpoint_s,
                                 runs=req.mc_runs, seed=req.seed)
        price = nodes * inst.spot_per_hour
        p90_hours = (mc["p90_s"] + inst.provision_s) / 3600.0
        row["spot"] = {
            **sp,
            "expected_hours": hours,
            "expected_cost": price * hours,
            "expected_tco": price * hours + req.delay_cost_per_hour * hours,
            "p50_hours": (mc["p50_s"] + inst.provision_s) / 3600.0,
            "p90_hours": p90_hours,
            "p90_cost": price * p90_hours,
            "monte_carlo": mc,
            "break_even_hazard_per_hour": _break_even(inst, nodes, solve_s, req, row["on_demand_tco"]),
            "hazard_per_hour": inst.hazard_per_hour,
        }
    return row


def _best_mode(row: dict, req: CostRequest) -> tuple[str, float, float, bool]:
    """(mode, money, hours, meets deadline) of the option's better mode."""
    modes = [("on_demand", row["on_demand_tco"], row["hours"], row["hours_range"]["high"])]
    if row["spot"]:
        s = row["spot"]
        modes.append(("spot", s["expected_tco"], s["expected_hours"], s["p90_hours"]))
    if req.rank_by == "time":
        m = min(modes, key=lambda x: x[2])
    else:
        ok = [x for x in modes if req.deadline_hours is None or x[3] <= req.deadline_hours]
        m = min(ok or modes, key=lambda x: x[1] if ok else x[2])
    meets = req.deadline_hours is None or m[3] <= req.deadline_hours
    return m[0], m[1], m[2], meets


def plan(req: CostRequest) -> dict:
    req.validate()
    notes: list[str] = []
    rows = [option(i, req, notes) for i in req.prices.instances]
    for row in rows:
        mode, money, hours, meets = _best_mode(row, req)
        row.update(best=mode, best_cost=money, best_hours=hours, meets_deadline=meets)
    if req.rank_by == "time":
        order = sorted(rows, key=lambda r: (r["best_hours"], r["best_cost"]))
    else:
        order = sorted(rows, key=lambda r: (not r["meets_deadline"], r["best_cost"] if r["meets_deadline"] else r["best_hours"]))
    for i, row in enumerate(order, 1):
        row["rank"] = i
    tp = req.throughput
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "rubin.plan.cost",
        "currency": req.prices.currency,
        "prices_as_of": req.prices.as_of,
        "work": req.work,
        "unit": req.unit,
        "measured": {"throughput": tp.value, "unit": tp.unit, "gpus": tp.gpus, "gpu": tp.gpu, "source": tp.source, "mfu": tp.mfu},
        "checkpoint_seconds": req.checkpoint_s,
        "rank_by": req.rank_by,
        "deadline_hours": req.deadline_hours,
        "delay_cost_per_hour": req.delay_cost_per_hour,
        "options": order,
        "notes": notes,
    }


def parse_scaling(items: list[str] | None) -> dict[int, float]:
    out = {}
    for item in items or []:
        try:
            g, e = item.split("=")
            out[int(g)] = float(e)
        except ValueError:
            raise bad_value("scaling", item, "GPUS=EFFICIENCY, e.g. --scaling 64=0.88") from None
    return out


def work_amount(work: float | None, epochs: float | None, dataset_size: float | None) -> float:
    if work is not None:
        if epochs is not None or dataset_size is not None:
            raise UsageError("give the work once: --work N, or --epochs E with --dataset-size S")
        return work
    if epochs is None or dataset_size is None:
        raise UsageError("the total work is missing: pass --work N (in --unit), or --epochs E and --dataset-size S")
    if not (epochs > 0 and dataset_size > 0):
        raise bad_value("epochs", epochs, "positive --epochs and --dataset-size")
    return epochs * dataset_size
