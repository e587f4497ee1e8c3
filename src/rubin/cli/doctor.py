"""``rubin doctor``: probe the machine, run every check, print findings (or --json); --explain, --deep."""

from __future__ import annotations

import json
import sys
import time


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true", help="print the report as JSON (schema_version 1)")
    p.add_argument("--deep", action="store_true",
                   help="also run active checks in subprocesses: a CUDA alloc + matmul per GPU and a 2-rank all-reduce")
    p.add_argument("--explain", metavar="TEXT",
                   help="explain a pasted error or log ('-' reads stdin): the known causes, ranked, with a confidence and fixes")
    p.add_argument("--no-facts", action="store_true", help="with --explain: do not probe this machine (the log came from elsewhere)")
    p.add_argument("--run-dir", default=".", help="the run/checkpoint dir whose free disk is checked (default: current dir)")
    p.add_argument("--only", action="append", metavar="ID",
                   help="run only these checks (an id, a prefix like 'gpu', or a concept); repeatable")
    p.add_argument("--all", action="store_true", help="also list the checks that passed")
    p.add_argument("--list-checks", action="store_true", help="list the checks and exit")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per --deep subprocess (default 60)")


def _console():
    from rich.console import Console

    probe = Console(file=sys.stdout)
    # A pipe or a log file gets 120 columns, so the fixes stay readable; a terminal keeps its width.
    return Console(file=sys.stdout, width=probe.width if probe.is_terminal else 120, soft_wrap=False)


def _explain(args) -> int:
    """--explain: imports only what it needs (no probe with --no-facts), so it answers in well under a second."""
    from rubin.errors import bad_value

    text = sys.stdin.read() if args.explain == "-" else args.explain
    if not text.strip():
        raise bad_value("--explain", args.explain, "a non-empty error text", "paste the error, or pipe a log with --explain -")
    from rubin.doctor import explain, logscan

    if logscan.is_log(text):  # a whole log: the root cause and its rank, not the best match of every line
        rep = logscan.report(text)
        if args.json:
            print(json.dumps(rep, indent=2))
        else:
            logscan.render(_console(), rep)
        return 0
    findings = None
    if not args.no_facts:
        from rubin.doctor import registry
        from rubin.platform.probe import probe
        from rubin.platform.sources import Sources

        # ask_torch=False: the probe never imports torch here, so CUDA is never initialised by --explain
        findings = registry.run_checks(probe(Sources(run_dir=args.run_dir), ask_torch=False))
    rep = explain.report(text, findings, facts_used=findings is not None)
    if args.json:
        print(json.dumps(rep, indent=2))
    else:
        explain.render(_console(), rep)
    return 0


def _check_run_dir(path: str) -> None:
    """The free-disk check reads this folder: a typo must not quietly measure another one."""
    from pathlib import Path

    from rubin.errors import bad_value

    p = Path(path)
    if not p.exists():
        raise bad_value("--run-dir", path, "an existing folder", "create it first, or pass the folder it will be made in")
    if not p.is_dir():
        raise bad_value("--run-dir", path, "a folder, not a file", "pass the run folder (or the folder that holds it)")


def run(args) -> int:
    from rubin.errors import ExitCode, bad_value

    t0 = time.perf_counter()
    _check_run_dir(args.run_dir)
    if args.explain is not None and not (args.list_checks or args.only):
        return _explain(args)
    from rubin.doctor import registry

    checks = registry.all_checks()
    if args.list_checks:
        rows = [{"id": c.id, "concept": c.concept, "title": c.title} for c in checks]
        if args.json:
            print(json.dumps({"schema_version": 1, "kind": "checks", "checks": rows}, indent=2))
        else:
            for r in rows:
                print(f"{r['id']:<28} {r['concept']:<13} {r['title']}")
        return 0
    if args.only:
        valid = {c.id for c in checks} | {c.concept for c in checks}
        for o in args.only:
            if not any(v == o or v.startswith(o.rstrip(".") + ".") for v in valid):
                raise bad_value("--only", o, "a check id, id prefix or concept (see --list-checks)")
    if args.timeout <= 0:
        raise bad_value("--timeout", args.timeout, "a positive number of seconds")
    if args.explain is not None:
        return _explain(args)

    from rubin.doctor import report
    from rubin.platform.probe import probe
    from rubin.platform.sources import Sources

    facts = probe(Sources(run_dir=args.run_dir))
    findings = registry.run_checks(facts, only=args.only)
    deep = []
    if args.deep:
        from rubin.doctor import deep as deep_mod

        deep = deep_mod.run_all(facts, timeout_s=args.timeout)
    wall = time.perf_counter() - t0
    allf = findings + deep
    n = len({f.check for f in allf})
    if args.json:
        print(json.dumps(report.build(facts, findings, n_checks=n, deep=deep, wall_s=round(wall, 3)), indent=2))
    else:
        report.render(_console(), facts, allf, show_ok=args.all, wall_s=wall)
    return int(ExitCode.PROBLEMS) if any(f.severity == "error" for f in allf) else 0
