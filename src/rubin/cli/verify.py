"""``rubin verify BASELINE... --new NEW... [--rules FILE] [--json]``: did the move change convergence?

Exit 0 pass (or inconclusive), 3 when a rollback rule fails (one ``rollback recommended:`` line per
broken rule on stderr), 2 for bad input. ``--strict`` also exits 3 on inconclusive.
"""

from __future__ import annotations


def add_arguments(parser) -> None:
    parser.add_argument("baseline", nargs="*", metavar="BASELINE", help="baseline run dirs (several: seeds of one config)")
    parser.add_argument("--new", nargs="+", metavar="NEW", default=[], help="new-platform run dirs (several: seeds of one config)")
    parser.add_argument("--rules", metavar="FILE", help="rollback rules YAML (keys left out keep the defaults; see --print-rules)")
    parser.add_argument("--method", default="auto", help="auto (default: the strongest the inputs allow), exact, curve, statistical")
    parser.add_argument("--json", action="store_true", help="print the result as JSON (schema rubin.verify.result, version 1)")
    parser.add_argument("--strict", action="store_true", help="exit 3 on an inconclusive verdict too")
    parser.add_argument("--print-rules", action="store_true", help="print the shipped default rules and exit")


def run(args) -> int:
    import json
    import sys

    from rubin.errors import ExitCode, UsageError
    from rubin.verify import rules as rules_mod

    if args.print_rules:
        print(rules_mod.defaults_text(), end="")
        return 0
    if not args.baseline or not args.new:
        raise UsageError("BASELINE and --new are both needed: rubin verify BASE_RUN [BASE_RUN...] --new NEW_RUN [NEW_RUN...]")
    from rubin.verify.core import verify

    result = verify(args.baseline, args.new, rules=rules_mod.load_rules(args.rules), method=args.method)
    if args.json:
        from rubin.runs import _clean

        print(json.dumps(_clean(result), indent=2))
    else:
        from rich.console import Console

        from rubin.verify.render import show

        show(result, Console())
    for line in result["rollback"]:
        print(line, file=sys.stderr)
    if result["verdict"] == "fail" or (args.strict and result["verdict"] == "inconclusive"):
        return int(ExitCode.PROBLEMS)
    return 0
