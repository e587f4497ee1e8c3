"""The section of a profiled run: a stacked breakdown per rank, the top kernels (or operators), the verdict."""

from __future__ import annotations

from pathlib import Path

from rubin.report import svg
from rubin.report.sections import Section, num

PARTS = (("compute_s", "compute"), ("comm_s", "comm"), ("memcpy_s", "memcpy"), ("data_s", "data"), ("idle_s", "idle"))


def extra(found: list) -> list:
    """A profiled run dir among the inputs also gets this section: (("profile", path), source) entries."""
    from rubin.profile.traces import find

    return [(("profile", data), src) for (kind, data), src in found if kind == "run" and find(data)]


def build(path, src: str) -> Section:
    from rubin.errors import UsageError
    from rubin.profile.analyze import analyze

    s = Section("profile", f"Profile: {Path(path).name}", src)
    try:
        res = analyze(path)
    except UsageError as err:  # traces of different runs: the page still renders, with the reason
        s.verdict("fail", f"the traces cannot be analysed: {err}")
        return s
    v = res.get("verdict")
    if v is None:
        s.verdict("inconclusive", "the traces hold no profiled step")
        return s
    s.verdict("pass" if v["id"] == "compute-bound" else "inconclusive", f"{v['finding']}")
    s.table(("", ""), [("evidence", v["evidence"]), ("cause", v["cause"]), *[("fix", f) for f in v["fix"]],
                       *([("also found", ", ".join(v["also"]))] if v.get("also") else [])])
    rows = [(f"rank {r['rank']}", {label: (r.get("median") or {}).get(key) for key, label in PARTS}) for r in res["ranks"]]
    s.fig("Where each rank's profiled step went (median over the traced steps)",
          svg.stacked(rows, [label for _, label in PARTS], title="step time per rank"))
    s.table(("rank", "host", "steps", "step ms", *[label + " ms" for _, label in PARTS], "comm overlap"),
            [(r["rank"], r.get("host") or "-", r["steps"], num(1e3 * (r.get("median") or {}).get("step_s", 0)),
              *[num(1e3 * ((r.get("median") or {}).get(k) or 0)) for k, _ in PARTS],
              "-" if (r.get("median") or {}).get("overlap") is None else f"{100 * r['median']['overlap']:.0f}%")
             for r in res["ranks"]])
    first = res["ranks"][0] if res["ranks"] else {}
    top, what = (first.get("top_kernels"), "kernels") if first.get("top_kernels") else (first.get("top_ops"), "operators (self time)")
    s.table((f"top {what}, rank {first.get('rank')}", "calls", "ms per step", "mean us"),
            [(t["name"][:100], t["count"], num(1e3 * t["per_step_s"]), num(t["mean_us"])) for t in (top or [])])
    cost = res.get("overhead") or {}
    if cost.get("ratio"):
        s.p(f"cost of profiling: a traced step took {cost['ratio']:.2f}x an untraced one (rank 0, medians)")
    for d in res.get("damaged") or []:
        s.p(f"note: damaged trace {d}")
    return s
