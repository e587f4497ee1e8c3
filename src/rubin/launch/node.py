"""The script every container node runs (k8s, Azure ML, SkyPilot): setup, torchrun, then the verdict.

It forwards TERM (what Kubernetes and the clouds send before a kill) to torchrun, which passes it
to the ranks; they save and exit 75. torchrun itself exits 1 after forwarding a signal, so the
script asks the run's ``summary.json`` how this attempt ended and exits with a code the platform
reads as intended: ``preempted_exit`` for a preemption, 0 for completed, torchrun's code otherwise.
"""

from __future__ import annotations

import shlex

from rubin.launch.job import SHARED_STORE_OFF, Job, shell_join


def script(job: Job, torchrun: list[str], *, preempted_exit: int = 75, exports: dict | None = None,
           pre_lines: list[str] = (), with_setup: bool = True) -> str:
    q = shlex.quote
    py = q(job.launch.python)
    lines = ["set -uo pipefail"]
    lines += [f"export {k}={v}" for k, v in (exports or {}).items()]
    lines += list(pre_lines)
    lines += job.launch.setup if with_setup else []
    lines += [
        f"export TORCH_ELASTIC_SHUTDOWN_TIMEOUT={job.grace_s}",
        f"export {SHARED_STORE_OFF}  # a restarted pod or node can rejoin the job (docs/faults.md)",
        "START=$(date +%s)",
        f"{shell_join(torchrun)} &",
        "PID=$!",
        "trap 'kill -TERM $PID' TERM INT",
        "while :; do wait $PID; rc=$?; kill -0 $PID 2>/dev/null || break; done",
        "wait $PID 2>/dev/null; rc=$?",
        f'STATUS=$({py} -m rubin.launch.status {q(job.run_dir)} --since "$START")',
        'echo "rubin-launch: torchrun exited $rc; this attempt of the run: $STATUS"',
        'case "$STATUS" in',
        "  completed) exit 0 ;;",
        f"  preempted|retry) exit {preempted_exit} ;;",
        '  *) [ "$rc" -ne 0 ] && exit "$rc"; exit 1 ;;',
        "esac",
    ]
    return "\n".join(lines) + "\n"
