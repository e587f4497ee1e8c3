"""``python -m rubin.launch.status RUN_DIR [--since EPOCH_S]``: print how this attempt of a run ended.

Job scripts call it after torchrun exits, because torchrun's exit code cannot tell a preemption from
a failure: after it forwards a signal it exits 1 even when every rank saved and exited 75. The
run's ``summary.json`` can. A summary older than ``--since`` (the attempt's start) belongs to an
earlier attempt and does not count: that prints ``none``, as does a missing or unreadable one. A run
that stopped because a peer went away (``retry`` in its summary) prints ``retry``: like a preemption,
a rerun resumes it from the last committed checkpoint.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rubin import runs


def attempt_status(run_dir: str | Path, since: float | None = None) -> str:
    path = Path(run_dir) / runs.SUMMARY
    try:
        if since is not None and path.stat().st_mtime < since - 1:  # 1 s: mtime granularity
            return "none"
        summary = json.loads(path.read_text())
        status = summary.get("status")
    except (OSError, ValueError, AttributeError):
        return "none"
    if status == "failed" and summary.get("retry") is True:  # stopped by a lost peer: a retry resumes
        return "retry"
    return status if isinstance(status, str) and status.isidentifier() else "none"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rubin.launch.status", description=__doc__.splitlines()[0])
    p.add_argument("run_dir")
    p.add_argument("--since", type=float, default=None, help="ignore a summary.json written before this Unix time")
    args = p.parse_args(argv)
    print(attempt_status(args.run_dir, args.since))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
