"""``rubin profile RUN_DIR [--json]``: where the step time goes on every rank, the bottleneck named.

Exit 0 with a verdict; 2 for bad input (no traces, traces of different runs, a damaged trace:
what could be read is still analysed and printed first).
"""

from __future__ import annotations


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run.dir of a run trained with --profile")
    parser.add_argument("--json", action="store_true", help="print the analysis as JSON (all the numbers)")


def run(args) -> int:
    import json

    from rubin.errors import UsageError
    from rubin.profile.analyze import analyze
    from rubin.profile.render import text

    res = analyze(args.run_dir)
    print(json.dumps(res, indent=2) if args.json else text(res), flush=True)
    if res["damaged"]:
        raise UsageError(f"damaged trace {res['damaged'][0]} (the rest was analysed above); "
                         "profile the run again for a whole trace")
    if res["verdict"] is None:
        raise UsageError(f"RUN_DIR {args.run_dir!r}: the traces hold no profiled step; profile a window inside the run")
    return 0
