"""``rubin launch TARGET CONFIG [--set k=v ...] [--dry-run] [--out FILE]``: the same job on torchrun,
Slurm, Kubernetes (PyTorchJob), Azure ML or SkyPilot.

rubin writes the target's native file (a torchrun command, an sbatch script, a PyTorchJob, an Azure
ML command job, a SkyPilot task) from the config's ``launch:`` section, then submits it with the
target's own CLI. Exit codes: 0 submitted (or, for local, completed), 1 the scheduler refused or
the local run failed, 2 bad input (nothing written), 75 the local run was preempted after a save.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from rubin.launch import targets


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="TARGET", help=f"where to run: {', '.join(targets.TARGETS)}")
    p.add_argument("config", metavar="CONFIG", help="train config YAML (its launch: section says where and how)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set launch.nodes=2 or --set optim.lr=1e-3 (repeatable)")
    p.add_argument("--launch", dest="launch_file", metavar="FILE", help="a YAML file with the launch section (overrides the config's)")
    p.add_argument("--nodes", type=int, help="same as --set launch.nodes=N")
    p.add_argument("--gpus-per-node", type=int, help="same as --set launch.gpus_per_node=N")
    p.add_argument("--dry-run", action="store_true", help="print the generated file and exit 0; submit nothing")
    p.add_argument("--out", metavar="FILE", help="also write the generated file here (kept, e.g. for git)")
    p.add_argument("--force", action="store_true", help="replace an existing --out file with other content")
    p.add_argument("--json", action="store_true", help="print the result as JSON (schema_version 1)")


def run(args) -> int:
    from rubin.launch import submit as sub
    from rubin.launch.resolve import resolve

    sets = list(args.overrides)
    if args.nodes is not None:
        sets.append(f"launch.nodes={args.nodes}")
    if args.gpus_per_node is not None:
        sets.append(f"launch.gpus_per_node={args.gpus_per_node}")
    env = dict(os.environ)
    job = resolve(args.target, args.config, sets, args.launch_file, env=env)
    target = targets.get(job.target)
    text = target.render(job)
    sub.check_out(args.out, text, args.force)
    for w in job.warnings:
        print(f"rubin launch: warning: {w}", file=sys.stderr)
    if args.dry_run:
        if args.out:
            sub.write(args.out, text)
        if args.json:
            print(json.dumps({"schema_version": 1, "target": job.target, "dry_run": True, "file": args.out,
                              "text": text, "warnings": job.warnings}, indent=2))
        else:
            print(text, end="")
        return 0
    sub.check_submit(target, job, env)
    out = sys.stderr if args.json else sys.stdout

    def say(*a):  # flushed: a supervisor's lines must show up at once, even in a log file
        print(*a, file=out, flush=True)

    result = target.submit(job, text, args.out, env, say=say)
    if args.json:
        print(json.dumps({"schema_version": 1, "target": job.target, "dry_run": False, "file": result.file,
                          "job_id": result.job_id, "follow": result.follow, "exit_code": result.exit_code,
                          "warnings": result.warnings}, indent=2))
    elif job.target != "local":
        kept = f" (file: {result.file})" if result.file else " (pass --out FILE to keep the file)"
        print(f"submitted {job.target} job {result.job_id or '(id not reported)'}{kept}")
        if result.follow:
            print(f"follow it with: {result.follow}")
    return result.exit_code
