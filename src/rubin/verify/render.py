"""Print a verify result for a person: method, checks, verdict, then throughput, time split and diffs."""

from __future__ import annotations

from rubin.verify.checks import fmt

COLOR = {"pass": "green", "fail": "red", "inconclusive": "yellow"}


def _fig(f, pct=False) -> str:
    if not f:
        return "-"
    if pct:
        return f"{100 * f['mean']:.0f}%" + (f" ± {100 * f['std']:.0f}" if f["n"] > 1 else "")
    return f"{fmt(f['median'])}" + (f" ({fmt(f['min'])}-{fmt(f['max'])}, n={f['n']})" if f["n"] > 1 else "")


def show(result: dict, console) -> None:
    from rich.markup import escape
    from rich.table import Table

    b, n = result["baseline"], result["new"]
    console.print(f"method: [bold]{result['method']}[/] ({result['method_reason']})", highlight=False)
    t = Table(title="checks")
    for c in ("check", "verdict", "reason"):
        t.add_column(c, overflow="fold")
    for c in result["checks"]:
        t.add_row(c["name"], f"[{COLOR[c['verdict']]}]{c['verdict']}[/]", escape(c["reason"]))
    console.print(t)
    t = Table(title="the two sides (median, min-max over seeds)")
    for c in ("", "baseline", "new"):
        t.add_column(c)
    t.add_row("runs", str(b["n"]), str(n["n"]))
    t.add_row("seeds", ", ".join(map(str, b["seeds"])), ", ".join(map(str, n["seeds"])))
    t.add_row("samples/s", _fig(b["samples_per_s"]), _fig(n["samples_per_s"]))
    t.add_row("MFU", _fig(b["mfu"], pct=True), _fig(n["mfu"], pct=True))
    for k, label in (("data_s", "time: data"), ("compute_s", "time: compute"), ("ckpt_s", "time: checkpoint")):
        t.add_row(label, _fig(b["time_share"][k], pct=True), _fig(n["time_share"][k], pct=True))
    for k in ("precision", "world_size", "strategy", "global_batch", "device"):
        t.add_row(k.replace("_", " "), str(b[k]), str(n[k]))
    if result["speedup"]:
        t.add_row("speedup", "", f"{result['speedup']:.2f}x")
    console.print(t)
    for rows, title, key in ((result["config_diff"], "config differences", "key"),
                             (result["env_diff"], "environment differences", "field")):
        if rows:
            t = Table(title=title)
            for c in (key, "baseline", "new"):
                t.add_column(c, overflow="fold")
            for d in rows:
                t.add_row(d[key], str(d["baseline"]), str(d["new"]))
            console.print(t)
    for p in result["problems"]:
        console.print(f"[yellow]note:[/] {p}", highlight=False)
    v = result["verdict"]
    console.print(f"verdict: [bold {COLOR[v]}]{v.upper()}[/]: {escape(result['reason'])}", highlight=False)
