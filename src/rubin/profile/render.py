"""The analysis as text: one table of the per-rank breakdown, the top operators, the verdict last."""

from __future__ import annotations

COLS = (("compute_s", "compute"), ("comm_s", "comm"), ("memcpy_s", "memcpy"), ("data_s", "data"), ("idle_s", "idle"),
        ("host_only_s", "host-only"))


def _ms(x) -> str:
    return "-" if x is None else f"{1e3 * x:.1f}"


def text(res: dict) -> str:
    lines = [f"rubin profile: {res['run_dir']} ({len(res['ranks'])} of {res['world_size']} ranks)"]
    if res.get("missing_ranks"):
        lines.append(f"  missing traces for ranks {', '.join(map(str, res['missing_ranks']))}: analysed without them")
    lines.append("  per step, median ms   step  " + "  ".join(f"{c:>9}" for _, c in COLS) + "  overlap  host")
    for r in res["ranks"]:
        m = r.get("median") or {}
        ov = m.get("overlap")
        lines.append(f"  rank {r['rank']:<3} ({r['steps']} steps) {_ms(m.get('step_s')):>6}  "
                     + "  ".join(f"{_ms(m.get(k)):>9}" for k, _ in COLS)
                     + f"  {'-' if ov is None else f'{100 * ov:.0f}%':>7}  {r.get('host') or '-'}")
    a = res.get("across") or {}
    if a.get("skew_s") is not None:
        lines.append(f"  across ranks: own-time skew {_ms(a['skew_s'])} ms (own {_ms(a['spread']['own_min_s'])}-"
                     f"{_ms(a['spread']['own_max_s'])} ms); the others wait {_ms(a['waited_for_s'])} ms per step for the slowest")
    first = res["ranks"][0] if res["ranks"] else {}
    for key, label in (("top_kernels", "top kernels"), ("top_ops", "top operators (self time)")):
        rows = first.get(key) or []
        if rows:
            lines.append(f"  {label}, rank {first['rank']}:")
            n = max(first.get("steps") or 1, 1)
            lines += [f"    {_ms(t['per_step_s']):>8} ms/step  {t['count'] / n:>6.0f} calls/step  {t['name'][:90]}" for t in rows[:5]]
    v = res.get("verdict")
    if v:
        lines += [f"verdict: {v['finding']}", f"  evidence: {v['evidence']}", f"  cause: {v['cause']}",
                  *[f"  fix: {f}" for f in v["fix"]]]
        if v.get("also"):
            lines.append(f"  also: {', '.join(v['also'])}")
    for d in res.get("damaged") or []:
        lines.append(f"damaged: {d}")
    return "\n".join(lines)
