"""``rubin checkpoint verify RUN_OR_CKPT_DIR [--json]`` and ``rubin checkpoint list RUN_DIR``.

verify: re-hashes every file against its MANIFEST.json; exit 0 when every checkpoint verifies,
3 when any is bad (or none exists), 2 for a path that is not a directory or cannot be read
(an unreadable step folder inside is listed as invalid: exit 3).
list: the same table from sizes only (fast, no hashing).
"""

from __future__ import annotations


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    v = sub.add_parser("verify", help="re-hash every checkpoint file against its manifest")
    v.add_argument("path", metavar="RUN_OR_CKPT_DIR", help="a run dir, its checkpoints/ folder, or one step-NNNNNNNN folder")
    v.add_argument("--json", action="store_true", help="print the report as JSON")
    ls = sub.add_parser("list", help="list a run's checkpoints (sizes checked, no hashing)")
    ls.add_argument("path", metavar="RUN_DIR", help="a run dir or its checkpoints/ folder")
    ls.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args) -> int:
    return verify_dir(args.path, as_json=args.json, hashes=args.action == "verify", action=args.action)


def verify_dir(path: str, *, as_json: bool = False, hashes: bool = True, action: str = "verify") -> int:
    """Check (and print) every checkpoint under PATH; 0 all good, 3 problems. Also ``rubin train --verify-checkpoints``."""
    import json

    from rubin.errors import ExitCode
    from rubin.train.checkpoint.report import inspect

    report = inspect(path, hashes=hashes)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        _print(report, action)
    return 0 if report["ok"] else int(ExitCode.PROBLEMS)


def _size(n) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _print(report: dict, action: str) -> None:
    entries = report["checkpoints"]
    print(f"checkpoints in {report['root']}: {len(entries)}")
    for e in entries:
        status = ("ok" if action == "verify" else "sizes ok") if e["valid"] else "INVALID"
        print(f"  step {e['step']:>8}  {status:<8}  {_size(e['bytes']):>10}  {e['files']} files  {e['path']}")
        for p in e["problems"]:
            print(f"      - {p}")
    for name in report["unfinished"]:
        print(f"  unfinished save (ignored by resume, removed at the next start): {name}")
    if not entries:
        print("  no checkpoints found")
    if action == "list":  # sizes cannot see flipped bytes: never claim what resume would pick without hashing
        print("unverified (sizes only): run `rubin checkpoint verify` to re-hash every file and see which one a resume picks")
        return
    latest = report["latest_valid"]
    print(f"resume would use: step {latest}" if latest is not None else "resume would use: nothing (no valid checkpoint)")
