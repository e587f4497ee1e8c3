"""Rich tables for ``rubin bench`` results (the CLI prints; this module formats)."""

from __future__ import annotations


def _f(x, digits=2) -> str:
    if x is None:
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.3g}" if abs(x) < 10 else f"{x:.{digits}f}"


def _ci(fig: dict, scale: float = 1.0) -> str:
    if not fig or fig.get("median") is None:
        return "-"
    lo, hi = fig["ci95"]
    return f"{_f(fig['median'] * scale)} [{_f(lo * scale)}, {_f(hi * scale)}]"


def _size(n: int) -> str:
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= div:
            return f"{n / div:.4g} {unit}"
    return f"{n} B"


def _clocks(nv: dict | None) -> tuple[str, str, str]:
    """SM clock (median), power (median) and a flag: "capped (sw_power_cap)" when NVML saw the clock held down."""
    if not nv or not nv.get("samples"):
        return "-", "-", "-"
    clock, power = nv.get("sm_clock_mhz") or {}, nv.get("power_w") or {}
    flag = f"CAPPED ({', '.join(nv['capped_by'])})" if nv.get("capped") else "full"
    def whole(x):
        return "-" if x is None else f"{x:.0f}"

    return whole(clock.get("median")), whole(power.get("median")), flag


def _headlines(summary: dict) -> list:
    from rich.table import Table

    t = Table(title="headline shape: burst (cool GPU) vs sustained (back-to-back); compare like with like")
    for c in ("device", "dtype", "shape", "burst TFLOPS", "SM MHz", "W", "sustained TFLOPS", "SM MHz ", "W ", "ratio"):
        t.add_column(c)
    for device, per_dtype in summary.items():
        for dtype, s in per_dtype.items():
            h = s.get("headline")
            if not h:
                continue
            b, su = h["burst"], h["sustained"]
            bc, sc = _clocks(b.get("nvml")), _clocks(su.get("nvml"))
            t.add_row(device, dtype, "x".join(map(str, h["shape"])), _f(b["tflops"]), bc[0], bc[1],
                      _f(su["tflops"]), sc[0], sc[1], f"{h['sustained_over_burst']:.3f}")
    return [t] if t.row_count else []


def fit(table, width: int | None):
    """Keep every digit at WIDTH columns: figure columns never wrap or shrink below their longest cell,
    the first (name) column folds, and what still does not fit is dropped from the right, named in the caption."""
    if width is None or len(table.columns) < 2 or not table.show_header:  # text tables wrap as they are
        return table
    for col in table.columns[1:]:  # as wide as its longest figure or header: nothing in it is cut
        col.min_width = max([len(str(c)) for c in col._cells] + [len(str(col.header))])
    first = table.columns[0]
    first.overflow, first.min_width = "fold", min(8, max([len(str(c)) for c in first._cells] + [1]))

    def needed() -> int:  # each column: its width + 2 of padding; plus one border between and around
        return sum(c.min_width + 2 for c in table.columns) + len(table.columns) + 1

    dropped = []
    while len(table.columns) > 2 and needed() > width:
        dropped.append(str(table.columns.pop().header))
    if dropped:
        table.caption = f"not shown at {width} columns: {', '.join(reversed(dropped))} (widen the terminal, or --json)"
    return table


def tables(doc: dict, width: int | None = None) -> list:
    return [fit(t, width) for t in _tables(doc)]


def _tables(doc: dict) -> list:
    from rich.table import Table

    out = []
    b = doc["benchmarks"]
    spec = doc.get("spec")
    head = Table(title="rubin bench", show_header=False)
    head.add_row("device", f"{doc['device']['name']} x{doc['device']['count']} ({doc['device']['type']})")
    head.add_row("spec", f"{spec['key']}{' (preliminary)' if spec.get('preliminary') else ''}" if spec else
                 f"none ({doc['spec_match'].get('reason')}): no % of spec")
    head.add_row("preset", f"{doc['preset']}, {doc['wall_s']:.1f} s")
    out.append(head)
    if "matmul" in b and b["matmul"].get("rows"):
        t = Table(title="matmul (TFLOPS: median [95% CI])")
        for c in ("device", "dtype", "m x n x k", "TFLOPS", "% spec", "SM MHz", "W", "clock"):
            t.add_column(c, justify="left" if c in ("device", "dtype", "m x n x k", "clock") else "right")
        for r in b["matmul"]["rows"]:
            t.add_row(r["device"], r["dtype"], f"{r['m']}x{r['n']}x{r['k']}", _ci(r["tflops"]),
                      _f(r.get("pct_of_spec"), 1), *_clocks(r.get("nvml")))
        out.append(t)
        out.extend(_headlines(b["matmul"].get("summary", {})))
    for name, title in (("membw", "device memory copy"), ("h2d", "host <-> device")):
        if name in b and b[name].get("rows"):
            t = Table(title=f"{title} (GB/s: median [95% CI])")
            for c in ("device", "op", "memory", "size", "GB/s", "% spec"):
                t.add_column(c)
            for r in b[name]["rows"]:
                t.add_row(r["device"], r["op"], r.get("memory", "-"), _size(r["bytes"]), _ci(r["gbps"]), _f(r.get("pct_of_spec"), 1))
            out.append(t)
    if "launch" in b and b["launch"].get("rows"):
        t = Table(title="kernel launch latency (us: median [95% CI])")
        for c in ("device", "wall us/launch", "device us/kernel"):
            t.add_column(c)
        for r in b["launch"]["rows"]:
            t.add_row(r["device"], _ci(r["wall_us"]), _ci(r["event_us"]))
        out.append(t)
    if "collectives" in b and b["collectives"].get("rows"):
        t = Table(title="collectives (nccl-tests conventions; GB/s = 1e9 B/s)")
        for c in ("op", "n", "size", "time us", "algbw", "busbw GB/s [95% CI]", "check"):
            t.add_column(c)
        for r in b["collectives"]["rows"]:
            t.add_row(r["op"], str(r["ranks"]), _size(r["bytes"]), _f(r["time_us"]["median"], 1), _f(r["algbw_gbps"]["median"], 3),
                      _ci(r["busbw_gbps"]), "ok" if r["verified"] else f"{r['wrong']} WRONG")
        out.append(t)
    if "io" in b and b["io"].get("rows"):
        t = Table(title="io")
        for c in ("op", "figure (median [95% CI])"):
            t.add_column(c)
        for r in b["io"]["rows"]:
            fig = r.get("gbps") or r.get("samples_per_s")
            t.add_row(r["op"], _ci(fig) + (" GB/s" if "gbps" in r else " samples/s"))
        out.append(t)
    if "model" in b and b["model"].get("rows"):
        t = Table(title="model benchmarks (the real training loop)")
        for c in ("workload", "prec", "samples/s", "tokens/s", "step ms p50/p90", "peak mem", "MFU", "MAMF-MFU", "J/sample"):
            t.add_column(c)
        for r in b["model"]["rows"]:
            p50, p90 = r["step_time_median_s"]["median"], r["step_time_p90_s"]["median"]
            mfu = r["mfu"]["median"]
            t.add_row(r["workload"], r["precision"], _ci(r["samples_per_s"], 1), _f(r["tokens_per_s"]["median"], 0),
                      f"{_f(p50 and p50 * 1e3, 1)}/{_f(p90 and p90 * 1e3, 1)}",
                      _size(r["peak_mem_bytes"]) if r.get("peak_mem_bytes") else "-",
                      f"{mfu:.1%}" if mfu is not None else "-", f"{r['mamf_mfu']:.1%}" if r.get("mamf_mfu") else "-",
                      _f(r["energy_j_per_sample"]["median"], 3))
        out.append(t)
    from rich.markup import escape  # error text may hold "[rank0]:" and the like

    problems = Table(title="not measured / errors", show_header=False)
    for name, e in b.items():
        if e.get("error"):
            problems.add_row(name, f"[red]{escape(e['error'])}[/red]")
        for s in e.get("skipped", []):
            problems.add_row(name, escape(f"{s.get('dtype', '')} skipped: {s['reason']}"))
        for n in e.get("notes", []):
            problems.add_row(name, escape(n))
    if problems.row_count:
        out.append(problems)
    return out
