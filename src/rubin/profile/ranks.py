"""Across ranks: step-time skew, the rank the others wait for in collectives, and the spread.

In synchronous data parallelism every rank's step takes as long as the slowest one's, so the
wall step time hides the straggler. What differs is the time each rank spends *waiting* in
collectives: the straggler arrives last and waits least, the others wait for it. A rank's own
time (its step minus that wait) is what it would take alone; its spread is the skew.
"""

from __future__ import annotations

import statistics

# A rank is named when the others wait for it longer than this share of the step. On a shared 2-core
# box, rank 0's own writing (a metrics line every step) alone made the others wait 10-40% of a 30 ms step.
WAIT_SHARE = 0.20


def _wait(m: dict) -> float:
    return m.get("comm_total_s") or m.get("comm_s") or 0.0


def compare(ranks: list[dict]) -> dict:
    """RANKS: per-rank dicts with 'rank', 'host' and 'median' (from breakdown.analyse)."""
    rows = [r for r in ranks if r.get("median")]
    out = {"ranks": len(rows), "straggler": None}
    if len(rows) < 2:
        return out
    own = {r["rank"]: r["median"]["step_s"] - _wait(r["median"]) for r in rows}
    step = {r["rank"]: r["median"]["step_s"] for r in rows}
    wait = {r["rank"]: _wait(r["median"]) for r in rows}
    out["own_s"], out["wait_s"], out["step_s"] = own, wait, step
    out["skew_s"] = max(own.values()) - min(own.values())
    out["spread"] = {"own_min_s": min(own.values()), "own_max_s": max(own.values()),
                     "own_median_s": statistics.median(own.values()),
                     "step_min_s": min(step.values()), "step_max_s": max(step.values())}
    slow = max(own, key=own.get)
    others = [r for r in rows if r["rank"] != slow]
    others_wait = statistics.median(wait[r["rank"]] for r in others)
    waited = others_wait - wait[slow]  # how much longer the others wait in collectives than the slow rank
    med_step = statistics.median(step.values())
    out["waited_for_s"] = waited
    if med_step > 0 and waited > WAIT_SHARE * med_step:
        me = next(r for r in rows if r["rank"] == slow)
        excess = {k: me["median"].get(k, 0.0) - statistics.median(r["median"].get(k) or 0.0 for r in others)
                  for k in ("data_s", "compute_s", "memcpy_s", "host_only_s", "idle_s") if me["median"].get(k) is not None}
        part = max(excess, key=excess.get)
        out["straggler"] = {"rank": slow, "host": me.get("host"), "waited_for_s": waited, "share": waited / med_step,
                            "bottleneck": part.removesuffix("_s"), "excess_s": excess}
    return out
