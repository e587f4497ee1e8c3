"""What a Slurm partition offers per node, from ``sinfo``: the job check compares a request against it."""

from __future__ import annotations

import re
import subprocess


def partition_limit(partition: str | None, *, gpu: bool) -> tuple[int | None, str]:
    """(GPUs or CPUs per node the partition offers, a description) from sinfo; (None, '') where unknown."""
    fmt = "%G" if gpu else "%c"
    argv = ["sinfo", "-h", "-o", fmt] + (["-p", partition] if partition else [])
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None, ""
    if out.returncode != 0 or not out.stdout.strip():
        return None, ""
    where = f"partition {partition!r}" if partition else "the default partition"
    values = []
    for line in out.stdout.split():
        if gpu:
            found = [int(n) for n in re.findall(r"gpu(?::[\w-]+)?:(\d+)", line)]
            values.append(max(found) if found else 0)
        elif line.rstrip("+").isdigit():
            values.append(int(line.rstrip("+")))
    if not values:
        return None, ""
    return max(values), f"{where} ({'GPUs' if gpu else 'CPUs'} from sinfo)"
