"""``analyze(run_dir)``: every rank's trace in, one JSON-ready dict out (what ``--json`` prints)."""

from __future__ import annotations

from pathlib import Path

from rubin.profile import breakdown, ranks, traces, verdict

KIND = "rubin.profile"


def analyze(run_dir) -> dict:
    loaded = traces.load(run_dir)
    per_rank, damaged = [], []
    for t in loaded:
        b = breakdown.analyse(t.events)
        per_rank.append({"rank": t.rank, "host": t.meta.get("host"), "trace": str(t.path), "damage": t.damage or None,
                         "window": t.meta.get("steps"), "stopped": t.meta.get("stopped"), **b})
        if t.damage:
            damaged.append(f"{t.path.name}: {t.damage}")
    world = max([t.meta.get("world_size") or 0 for t in loaded] + [len(loaded)])
    missing = sorted(set(range(world)) - {t.rank for t in loaded})
    usable = [r for r in per_rank if r["steps"]]
    across = ranks.compare(usable)
    v = verdict.verdict(usable, across) if usable else None
    meta = loaded[0].meta
    return {"kind": KIND, "run_dir": str(Path(run_dir)), "run_id": meta.get("run_id"), "world_size": world,
            "schedule": meta.get("schedule"), "overhead": meta.get("overhead"),
            "ranks": per_rank, "missing_ranks": missing, "across": across, "verdict": v,
            "verdict_line": verdict.one_line(v) if v else None, "damaged": damaged}
