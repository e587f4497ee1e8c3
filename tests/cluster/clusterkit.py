"""The emulated cluster (scripts/local_cluster.py) for tests: a fixture that makes one and always takes it down.

Each test's cluster has its own name, so two pytest workers can each hold one. ``up`` ties the cluster
to this process (a reaper takes it down if the worker dies or times out), and the fixture takes it
down itself at the end of the test, passed or failed.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import local_cluster  # noqa: E402  (a script of this repository, not a package)

_count = itertools.count()


def unavailable() -> str | None:
    """Why no cluster can be made here, or None."""
    if os.geteuid() != 0:
        return "the emulated cluster needs root (network, PID and mount namespaces)"
    for tool in ("ip", "nft", "tc", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            return f"the emulated cluster needs {tool} (apt-get install iproute2 nftables util-linux)"
    probe = f"rubin-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"network namespaces are not available here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def needs_cluster():
    why = unavailable()
    return pytest.mark.skipif(why is not None, reason=why or "")


def make(n: int) -> local_cluster.Cluster:
    local_cluster.down_stale()
    c = local_cluster.Cluster(f"t{os.getpid()}-{next(_count)}")
    c.up(n, owner=os.getpid())
    return c


def leftovers(c: local_cluster.Cluster) -> list[str]:
    """What of cluster C is still on this machine: namespaces, processes, its folder."""
    left = [ns for ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
            if ns.startswith(c.name + "-")]
    if c.dir.exists():
        left.append(str(c.dir))
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    left += [line for line in ps.splitlines() if f"{c.dir}/hosts/" in line]
    return left
