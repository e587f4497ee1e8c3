"""``rubin compare BASELINE NEW [--rules FILE]``: is this node healthy, how much faster is the new platform.

With one file, only the peer-outlier check runs (no baseline needed). Exit 3 when a rule fails.
"""

from __future__ import annotations


def add_arguments(parser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="BASELINE NEW (two results files), or one file for peer outliers only")
    parser.add_argument("--rules", metavar="FILE", help="rules YAML (default: the SuperBench-style rules shipped with rubin)")
    parser.add_argument("--strict", action="store_true", help="treat marginal verdicts (interval straddles the limit) as failures")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    parser.add_argument("--all", action="store_true", help="show every metric, not only the ones that did not pass")
    parser.add_argument("--list-metrics", action="store_true", help="print the metric keys of the file(s) that rules can match, and exit")


def run(args) -> int:
    import json

    from rubin.bench import compare, metrics, results
    from rubin.errors import ExitCode, UsageError

    if len(args.files) > 2:
        raise UsageError(f"FILE={args.files!r} is not valid: pass BASELINE NEW, or one file; got {len(args.files)} files")
    docs = []
    for path in args.files:
        doc = results.load(path)
        doc["_path"] = path
        docs.append(doc)
    if args.list_metrics:
        for key in sorted(set().union(*(metrics.flatten(d) for d in docs))):
            print(key)
        return 0
    rules = compare.load_rules(args.rules)
    base, new = (docs[0], docs[1]) if len(docs) == 2 else (None, docs[0])
    report = compare.compare(base, new, rules, strict=args.strict)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        _print(report, show_all=args.all)
    return int(ExitCode.PROBLEMS) if report["verdict"] == "fail" else 0


def _fmt(x) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def _print(report: dict, *, show_all: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    color = {"pass": "green", "marginal": "yellow", "fail": "red"}
    if report["baseline"]:
        b, n = report["baseline"], report["new"]
        console.print(f"baseline: {b['path']} ({b['device']} x{b['count']}, {b['created']})")
    n = report["new"]
    console.print(f"new:      {n['path']} ({n['device']} x{n['count']}, {n['created']})")
    if report["speedup"]:
        t = Table(title="speedup, new against baseline (> 1: new is faster)")
        for c in ("workload", "baseline", "new", "speedup"):
            t.add_column(c)
        for r in report["speedup"]:
            t.add_row(r["workload"], _fmt(r["baseline"]), _fmt(r["new"]), f"{r['speedup']:.2f}x")
        console.print(t)
    rows = [r for r in report["metrics"] if show_all or r["verdict"] != "pass"]
    if rows:
        t = Table(title="rules" + ("" if show_all else " (metrics that did not pass; --all for every one)"))
        t.add_column("metric", overflow="fold")
        for c in ("limit", "baseline", "new [95% CI]", "change", "verdict"):
            t.add_column(c)
        for r in rows:
            ci = f"{_fmt(r['new'])} [{_fmt(r['ci95'][0])}, {_fmt(r['ci95'][1])}]" if r["ci95"] else "-"
            change = f"{r['change_pct']:+.1f}%" if r["change_pct"] is not None else "-"
            limit = r["criterion"].replace("max_below_pct=", "-").replace("max_above_pct=", "+").replace("within_pct=", "+-") + "%"
            weak = " (weak)" if r.get("caveats") else ""
            t.add_row(r["metric"], limit, _fmt(r["baseline"]), ci, change, f"[{color[r['verdict']]}]{r['verdict']}[/]{weak}")
        console.print(t)
        console.print("fail: the whole 95% interval is past the limit; marginal: it straddles the limit "
                      "(rerun with more trials, or --strict to count it as a failure); missing metrics fail")
    if report["outliers"]:
        t = Table(title="peer outliers (a GPU below the median of its node peers)")
        for c in ("metric", "device", "value", "peer median", "below"):
            t.add_column(c)
        for o in report["outliers"]:
            t.add_row(o["metric"], o["device"], _fmt(o["value"]), _fmt(o["peer_median"]), f"[red]{o['below_pct']:.1f}%[/]")
        console.print(t)
    if report["env_diff"]:
        t = Table(title="environment differences")
        for c in ("field", "baseline", "new"):
            t.add_column(c)
        for d in report["env_diff"]:
            t.add_row(d["field"], str(d["baseline"]), str(d["new"]))
        console.print(t)
    from rich.markup import escape

    c = report["counts"]
    for line in report.get("caveats", []):
        console.print(f"[yellow]caveat[/]: {escape(line)}", soft_wrap=True)
    weak = report.get("weak_verdicts", 0)
    console.print(f"verdict: [{color[report['verdict']]}]{report['verdict'].upper()}[/]  "
                  f"({c['pass']} pass, {c['marginal']} marginal, {c['fail']} fail, {len(report['outliers'])} peer outliers)"
                  + (f"; {weak} verdict(s) rest on noisy or contended figures: rerun on an idle machine" if weak else
                     "; built on contended input: rerun on an idle machine" if report.get("caveats") else ""))
