"""``rubin env``: print the environment fingerprint as markdown (to paste into an issue) or JSON,
including the launcher this process runs under (torchrun, Slurm, PyTorchJob, SkyPilot, ...) and its rank."""

from __future__ import annotations

import json


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true", help="print JSON (the fingerprint, schema_version 1, plus 'launcher' and 'extra')")
    p.add_argument("--quick", action="store_true", help="only the quick fingerprint that runs store in env.json (no subprocesses)")
    p.add_argument("--run-dir", default=None, help="also describe this run dir's filesystem and free space")


def run(args) -> int:
    from rubin.platform.envreport import full_env, markdown

    env = full_env(args.run_dir, quick=args.quick)
    print(json.dumps(env, indent=2) if args.json else markdown(env))
    return 0
