"""Human output of the planners (rich). The data comes from the planners; this only prints it."""

from __future__ import annotations

from rubin.plan import GIB


def _console(width: int = 120):
    import shutil

    from rich.console import Console

    # the tables need this many columns; a pipe or a narrow terminal still gets them whole
    return Console(highlight=False, width=max(shutil.get_terminal_size((width, 24)).columns, width))


def _gib(b) -> str:
    return "-" if b is None else f"{b / GIB:,.2f}"


def memory(res: dict) -> None:
    from rich.table import Table

    c = _console(160)
    m, s, g = res["model"], res["setup"], res["gpu"]
    c.print(f"[bold]rubin plan memory[/bold]: {m['name']}"
            + ("" if m["kind"] == "params" else f", {m['params'] / 1e9:.3g}B params")
            + (f", seq {m['seq_len']}" if m.get("seq_len") else "")
            + f"; micro-batch {s['micro_batch']}; {s['gpus']} GPUs ({s['nodes']} x {s['gpus_per_node']}); "
            f"{s['precision']}, {s['optimizer']}" + (f", conservative ({s['conservative']})" if s["conservative"] else ""))
    if g["name"]:
        c.print(f"GPU {g['name']}: {_gib(g['memory_bytes'])} GiB, planning into {_gib(g['budget_bytes'])} GiB "
                f"({g['usable_fraction']:.0%})")
    t = Table(title="memory per GPU (GiB)")
    for col in ("strategy", "weights", "16-bit copy", "grads", "DDP buckets", "optim", "gathered", "activations",
                "peak at", "overhead", "total", "fits", "max micro-batch"):
        t.add_column(col, justify="left" if col in ("strategy", "peak at") else "right")
    for r in res["strategies"]:
        ms = r["model_states"]
        fits = "-" if r["fits"] is None else ("[green]yes[/green]" if r["fits"] else
                                              "[yellow]tight[/yellow]" if r.get("fits_without_margin") else "[red]no[/red]")
        label = r["label"] + (" *" if r["strategy"] == res["recommended"] else "")
        t.add_row(label, _gib(ms["weights_bytes"]), _gib(ms["weight_cast_bytes"]), _gib(ms["grads_bytes"]),
                  _gib(ms["ddp_bucket_bytes"]), _gib(ms["optimizer_bytes"]), _gib(ms["gathered_layer_bytes"]),
                  _gib(r["activation_bytes"]), r["peak_phase"].replace("_", " "), _gib(r["overhead_bytes"]),
                  _gib(r["total_bytes"]), fits, "-" if r["max_micro_batch"] is None else str(r["max_micro_batch"]))
    c.print(t)
    c.print("total = the step's largest phase (\"peak at\") + overhead; activations at their peak")
    c.print(f"[bold]{res['verdict']}[/bold]")
    if res.get("margin"):
        c.print(res["margin"]["text"], soft_wrap=True)
    rec = next((r for r in res["strategies"] if r["strategy"] == res["recommended"]), None)
    if rec:
        c.print(f"* {rec['description']}")
    for n in res["notes"]:
        c.print(f"note: {n}", soft_wrap=True)


def _money(x) -> str:
    if x is None:
        return "-"
    if abs(x) >= 1e6:
        return f"{x / 1e6:,.2f}M"
    if abs(x) >= 1e4:
        return f"{x / 1e3:,.1f}k"
    return f"{x:,.0f}"


def _hours(x) -> str:
    return "-" if x is None else (f"{x:,.0f}" if x >= 100 else f"{x:,.1f}")


def cost(res: dict) -> None:
    from rich.table import Table

    c = _console(150)
    cur = res["currency"]
    m = res["measured"]
    c.print(f"[bold]rubin plan cost[/bold]: {res['work']:.3g} {res['unit']} at {m['throughput']:,.1f} {m['unit']}/s "
            f"on {m['gpus']} x {m['gpu'] or 'unknown GPU'} ({m['source']}); prices as of {res['prices_as_of'] or '?'}")
    t = Table(title=f"ranked by {res['rank_by']}; money in {cur}, time in hours")
    for col in ("#", "option", "GPUs", "hours", "on demand", "spot h", "spot", "spot P90", "evictions",
                "ckpt every", "break-even hazard /node-h", "best"):
        t.add_column(col, justify="left" if col in ("option", "best", "GPUs") else "right",
                     no_wrap=col in ("option", "hours", "GPUs"))
    for r in res["options"]:
        s = r["spot"] or {}
        hours = _hours(r["hours"])
        if r["projection"]:
            hours = f"{_hours(r['hours_range']['low'])}-{_hours(r['hours_range']['high'])}*"
        if s:
            every = "on notice" if s["emergency_checkpoint_fits"] else f"{s['checkpoint_interval_s'] / 60:.0f} min"
            spot_cols = (_hours(s["expected_hours"]), _money(s["expected_cost"]), _money(s["p90_cost"]),
                         f"{s['expected_preemptions']:.1f}", every, f"{s['break_even_hazard_per_hour']:.3g}")
        else:
            spot_cols = ("-",) * 6
        best = r["best"].replace("_", " ") + ("" if r["meets_deadline"] else " (late)")
        t.add_row(str(r["rank"]), r["name"], f"{r['nodes']}x{r['gpus_per_node']} {r['gpu']}", hours,
                  _money(r["on_demand_cost"]), *spot_cols, best)
    c.print(t)
    for r in res["options"]:
        if r["projection"]:
            p = r["projection"]
            c.print(f"* projection {p['from_gpu']} -> {p['to_gpu']} ({p['regime']}): x{p['speedup']['low']:.2f} to "
                    f"x{p['speedup']['high']:.2f} per GPU; costs use the middle (x{p['speedup']['mid']:.2f}); "
                    "details: rubin plan project")
    for n in res["notes"]:
        c.print(f"note: {n}")


def projections(res: dict) -> None:
    c = _console()
    m = res["measured"]
    c.print(f"[bold]rubin plan project[/bold]: measured {m['per_gpu_throughput']:,.1f} {m['unit']}/s per GPU on {m['gpu']}")
    for p in res["projections"]:
        t = p["per_gpu_throughput"]
        s = p["speedup"]
        c.print(f"[bold]projection[/bold] to {p['to_gpu']} ({p['regime']}): {t['low']:,.1f} - {t['high']:,.1f} "
                f"{p['unit']}/s per GPU (x{s['low']:.2f} - x{s['high']:.2f}, middle x{s['mid']:.2f})")
        for a in p["assumptions"]:
            c.print(f"  assumes: {a}")
        if "error" in p:
            e = p["error"]
            c.print(f"  measured {e['actual_per_gpu']:,.1f}: middle off by {e['error_mid']:+.1%}, "
                    f"{'inside' if e['within_range'] else 'outside'} the range")


def advice(res: dict) -> None:
    c = _console()
    c.print(f"[bold]rubin plan advise[/bold]: {res['recommendation']}", soft_wrap=True)
    for r in res["reasons"]:
        c.print(f"  - {r}", soft_wrap=True)
