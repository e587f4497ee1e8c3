"""``rubin qualify [--baseline DIR] [--workload CONFIG] [--prices FILE] [--quick] [--out DIR]``.

Stages: doctor -> bench -> compare -> workload (k seeds) -> verify -> plan cost -> report.html,
then certificate.json. ``--check certificate.json`` re-verifies hashes and signature.
Exit 0 pass, 3 fail (or a tampered certificate), 1 inconclusive (a stage could not run), 2 bad input.
"""

from __future__ import annotations

import sys


def add_arguments(parser) -> None:
    parser.add_argument("--baseline", metavar="DIR", help="a bundle written by --save-baseline on the old platform")
    parser.add_argument("--workload", metavar="CONFIG", help="your training config (default: the baseline's, else the reference)")
    parser.add_argument("--prices", metavar="FILE", help="price list YAML for the plan cost stage (see examples/prices.example.yaml)")
    parser.add_argument("--work", type=float, default=1e9, help="samples to price in the plan cost stage (default 1e9)")
    parser.add_argument("--quick", action="store_true", help="the CPU/CI preset: under 5 minutes on 2 cores")
    parser.add_argument("--seeds", type=int, default=3, help="workload seeds (default 3; verify wants 3 a side)")
    parser.add_argument("--out", metavar="DIR", default=None, help="where everything goes (default: qualify-<time>)")
    parser.add_argument("--save-baseline", metavar="DIR", help="also write the baseline bundle here (run this on the old platform)")
    parser.add_argument("--sign-key", metavar="PEM", help="sign the certificate with this Ed25519 private key")
    parser.add_argument("--new-key", metavar="PEM", help="write a new Ed25519 key pair (PEM, and PEM.pub) and exit")
    parser.add_argument("--skip", action="append", default=[], metavar="STAGE",
                        help="leave a stage out (repeatable): doctor, bench, compare, workload, verify, plan-cost")
    parser.add_argument("--keep-going", action="store_true", help="run the later stages even when doctor finds errors")
    parser.add_argument("--check", metavar="CERT", help="verify a certificate's file hashes and signature, and exit")
    parser.add_argument("--public-key", metavar="PEM", help="with --check: the certificate must be signed by this key")
    parser.add_argument("--json", action="store_true", help="print the certificate (or the check result) as JSON")


def run(args) -> int:
    import datetime as dt
    import json
    from pathlib import Path

    from rubin.errors import ExitCode, UsageError, bad_value
    from rubin.qualify import certificate as cm

    if args.new_key:
        p = cm.new_key(args.new_key)
        print(f"private key: {p} (keep it secret)\npublic key:  {p}.pub (give it to whoever checks certificates)")
        return 0
    if args.check:
        res = cm.check(args.check, args.public_key)
        if args.json:
            print(json.dumps(res, indent=2))
        else:
            sig = (f"signature ok (Ed25519 key {res['key'][:16]}…)" if res["signed"] else
                   "unsigned: the hashes show the files match this certificate, not who wrote it")
            print(f"certificate ok: {res['files']} files match their sha256; {sig}; verdict {str(res['verdict']).upper()}")
        return 0
    if args.seeds < 1:
        raise bad_value("--seeds", args.seeds, "a positive number of seeds", "3 recommended: --seeds 3")
    if args.work <= 0:
        raise bad_value("--work", args.work, "a positive number of samples")
    from rubin.qualify import core
    from rubin.qualify.stages import STAGES, Context

    names = [n.replace(" ", "-") for n, _ in STAGES]
    for name in args.skip:
        if name not in names:
            from rubin.errors import bad_choice

            raise bad_choice("--skip", name, names)

    baseline = core.check_bundle(args.baseline) if args.baseline else None
    if args.workload and not Path(args.workload).is_file():
        raise UsageError(f"--workload {args.workload!r} does not exist; pass a training config YAML")
    if args.prices:
        from rubin.plan import prices

        prices.load(args.prices)  # a bad price list fails now, not after minutes of benchmarks
    key = cm.load_private_key(args.sign_key) if args.sign_key else None
    if args.save_baseline and Path(args.save_baseline).exists() and any(Path(args.save_baseline).iterdir()):
        raise UsageError(f"--save-baseline {args.save_baseline!r} exists and is not empty; choose a new DIR")
    out = Path(args.out or f"qualify-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}")
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"--out {str(out)!r} exists and is not empty; refusing to mix two qualifications, choose a new DIR")
    ctx = Context(out=out, quick=args.quick, seeds=args.seeds, baseline=baseline, workload=args.workload, prices=args.prices,
                  work=args.work, keep_going=args.keep_going, skip=set(args.skip))
    cert = _run_with_progress(ctx, key)
    if args.save_baseline:
        dest = core.save_baseline(ctx, Path(args.save_baseline))
        print(f"baseline bundle: {dest}", file=sys.stderr)
    if args.json:
        print(json.dumps(cert, indent=2))
    else:
        _print(cert, out)
    return {"pass": 0, "fail": int(ExitCode.PROBLEMS)}.get(cert["verdict"], int(ExitCode.FAILURE))


def _run_with_progress(ctx, key):
    from rich.console import Console

    from rubin.qualify import core
    from rubin.qualify.stages import STAGES

    err = Console(stderr=True)
    total = len(STAGES) + 1
    if err.is_terminal:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                      TimeElapsedColumn(), console=err) as bar:
            task = bar.add_task("qualify", total=total)

            def start(i, name):
                bar.update(task, description=f"[{i + 1}/{total}] {name}")

            def done(i, stage):
                bar.console.print(f"  {stage['name']:<10} {stage['status']:<8} {stage['wall_s']:7.1f} s  {stage['detail']}", markup=False,
                                  highlight=False)
                bar.advance(task)
            return core.qualify(ctx, on_start=start, on_done=done, sign_key=key)

    def plain(i, stage):  # not a TTY: one plain line per stage
        print(f"qualify: [{i + 1}/{total}] {stage['name']} {stage['status']} ({stage['wall_s']:.1f} s): {stage['detail']}",
              file=sys.stderr, flush=True)
    return core.qualify(ctx, on_done=plain, sign_key=key)


def _print(cert: dict, out) -> None:
    from rich.console import Console
    from rich.markup import escape

    color = {"pass": "green", "fail": "red"}.get(cert["verdict"], "yellow")
    c = Console()
    c.print(f"verdict: [bold {color}]{cert['verdict'].upper()}[/]: {escape(cert['reason'])}", highlight=False)
    signed = "signed (Ed25519)" if cert.get("signature") else "unsigned"
    c.print(f"report: {out / 'report.html'}\ncertificate: {out / 'certificate.json'} ({len(cert['inputs'])} files hashed, {signed}); "
            f"check it with: rubin qualify --check {out / 'certificate.json'}", highlight=False)
