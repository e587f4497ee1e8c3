"""``python -m rubin.launch.agent --run-dir DIR [...] -- TORCHRUN_ARGS``: what every node of a multi-host job runs.

rubin's multi-host job files (``rubin launch local`` with a remote rendezvous host, ``slurm``) start this
on each node instead of torchrun. It

1. checks this node before the job spends any time, each failure one line naming this host (exit 2):
   the rendezvous host resolves here, and not to loopback unless this node is the rendezvous host;
   the run dir is writable here; no ``--node-rank`` with c10d (c10d assigns ranks; a fixed rank hangs);
   no loopback endpoint for several nodes (each machine would form its own world);
2. avoids the known traps, and says so: ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (with torch's shared
   store a replacement node never rejoins: the agents that stayed reuse round 0's bootstrap address and
   never publish the new round's, docs/faults.md); an endpoint given as an IP gets ``is_host`` from this
   node's own addresses (otherwise no node may host the store, pytorch#79388); ``--local-addr`` is this
   node's address on its route to the rendezvous host, not whatever its hostname resolves to;
3. runs torchrun, passing on TERM, INT, HUP, USR1 and USR2;
4. when torchrun ends, exits by the run's own account (``rubin.launch.status``): 0 completed, 75
   preempted or stopped by a lost peer (a retry resumes from the last committed checkpoint), else
   torchrun's code. When torchrun ended because the rendezvous went away (its host died or this node
   was cut off) and the run is not complete, it waits up to ``--rejoin-s`` for the rendezvous host to
   answer again and starts a fresh torchrun, which joins the re-formed job.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from rubin.errors import ExitCode, UsageError
from rubin.launch.status import attempt_status
from rubin.platform import network
from rubin.redact import redact
from rubin.train.hosts import check_socket_vars

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def say(line: str) -> None:
    print(f"rubin agent [{network.hostname()}]: {line}", file=sys.stderr, flush=True)


def option(args: list[str], name: str) -> str | None:
    """The value of torchrun's --NAME (either spelling, '=' or a separate word)."""
    spellings = (f"--{name}", f"--{name.replace('-', '_')}")
    for i, a in enumerate(args):
        for s in spellings:
            if a == s and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(s + "="):
                return a.split("=", 1)[1]
    return None


def split_endpoint(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--rdzv-endpoint={endpoint!r} is not valid: allowed is HOST:PORT, e.g. nodeA:29400")
    return host.strip("[]"), int(port)


def prepare(torchrun: list[str], run_dir: str, *, same_machine: bool, env: dict) -> tuple[list[str], list[str]]:
    """Check this node and return (the torchrun arguments to run, what was changed and why)."""
    here = network.hostname()
    if (option(torchrun, "rdzv-backend") or "static") == "c10d" and option(torchrun, "node-rank") not in (None, "0"):
        raise UsageError(f"--node-rank={option(torchrun, 'node-rank')} is not valid with --rdzv-backend=c10d on {here}: "
                         "c10d gives each node its rank, and a fixed one makes the rendezvous hang; drop --node-rank")
    endpoint = option(torchrun, "rdzv-endpoint")
    if endpoint is None:
        raise UsageError("--rdzv-endpoint is missing: every node must name the rendezvous host, e.g. --rdzv-endpoint=nodeA:29400")
    host, _ = split_endpoint(endpoint)
    nnodes = option(torchrun, "nnodes") or "1"
    many = max(int(n) for n in nnodes.split(":")) > 1
    changed = []
    addr = host if network.is_address(host) else network.resolve(host)
    mine = network.own_addresses()
    if addr is None:
        raise UsageError(f"rendezvous host {host!r} does not resolve on {here}: every node must resolve it to the same address; "
                         f"fix {here}'s /etc/hosts or DNS, or give launch.rdzv_host as a name that does")
    this_host = host in (here, socket.getfqdn())  # the endpoint names this node: its own name may resolve to loopback here
    if network.is_loopback(addr) and many and not same_machine and not this_host:
        raise UsageError(f"rendezvous host {host!r} is {addr} (loopback) on {here}, with {nnodes} nodes: each machine would form a "
                         "world of its own and wait forever; set launch.rdzv_host to the first node's name"
                         + (f" (on {here} it resolves to loopback: fix its /etc/hosts)" if not network.is_address(host) else ""))
    args = list(torchrun)
    if many and not network.is_loopback(addr):
        if network.is_address(host) and "is_host" not in (option(args, "rdzv-conf") or ""):
            is_host = addr in mine
            args = _add_conf(args, f"is_host={int(is_host)}")
            changed.append(f"the endpoint {endpoint} is an address: torch may then let no node host the rendezvous (pytorch#79388); "
                           f"set is_host={int(is_host)} here ({here} {'has' if is_host else 'does not have'} {addr})")
        route = network.route_to(addr)
        if route is not None and option(args, "local-addr") is None and not network.is_loopback(route.src):
            args = ["--local-addr", route.src, *args]
            changed.append(f"--local-addr {route.src}: {here}'s address on its route to {host} ({route.iface})")
    _check_writable(run_dir, here)
    check_socket_vars(env)
    if env.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE") != "1":
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    return args, changed


def _add_conf(args: list[str], item: str) -> list[str]:
    conf = option(args, "rdzv-conf")
    if conf is None:
        return ["--rdzv-conf", item, *args]
    out = []
    for a in args:
        if a.startswith(("--rdzv-conf=", "--rdzv_conf=")):
            a = f"{a},{item}"
        elif a == conf and out and out[-1] in ("--rdzv-conf", "--rdzv_conf"):
            a = f"{a},{item}"
        out.append(a)
    return out


def _check_writable(run_dir: str, here: str) -> None:
    probe = Path(run_dir) / f".write-test-{here}-{os.getpid()}"
    try:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise UsageError(f"run dir {run_dir!r} is not writable on {here} ({err.strerror}): every node writes its checkpoint shards "
                         "and heartbeats there; mount the shared filesystem read-write on every node") from None


def reachable(host: str, port: int, timeout: float = 2.0) -> bool:
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def run(torchrun: list[str], run_dir: str, *, rejoin_s: float, rejoins: int, python: str = sys.executable,
        same_machine: bool = False) -> int:
    env = dict(os.environ)
    args, changed = prepare(torchrun, run_dir, same_machine=same_machine, env=env)
    for line in changed:
        say(line)
    host, port = split_endpoint(option(args, "rdzv-endpoint"))
    addr = host if network.is_address(host) else network.resolve(host)
    head = addr in network.own_addresses() or network.is_loopback(addr)  # the store lives here and dies with torchrun
    attempt = 0
    while True:
        start = time.time()
        rc = _torchrun([python, "-m", "torch.distributed.run", *args], env)
        status = attempt_status(run_dir, start)
        if status == "completed":
            return int(ExitCode.OK)
        if status == "preempted":
            return int(ExitCode.PREEMPTED)
        if _stopping or head or reachable(host, port) or attempt >= rejoins:
            if status == "retry" or (attempt >= rejoins and not head and not reachable(host, port)):
                say(f"torchrun exited {rc}; the run can resume from its last committed checkpoint: exit 75 (requeue or rerun)")
                return int(ExitCode.PREEMPTED)
            return rc if rc else int(ExitCode.FAILURE)
        attempt += 1
        say(f"the rendezvous at {host}:{port} is gone (its host died or this node is cut off); waiting up to {rejoin_s:g} s for "
            f"it to come back ({attempt}/{rejoins})")
        deadline = time.monotonic() + rejoin_s
        while not reachable(host, port):
            if time.monotonic() > deadline or _stopping:
                say(f"the rendezvous at {host}:{port} did not come back within {rejoin_s:g} s; this node stops: exit 75 "
                    "(a rerun resumes from the last committed checkpoint)")
                return int(ExitCode.PREEMPTED)
            time.sleep(1.0)
        say(f"the rendezvous at {host}:{port} answers again: this node rejoins the job")


_stopping = False
_child: subprocess.Popen | None = None


def _forward(signum, frame) -> None:
    global _stopping
    _stopping = True
    if _child is not None and _child.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            _child.send_signal(signum)


def _torchrun(argv: list[str], env: dict) -> int:
    global _child
    _child = subprocess.Popen(argv, env=env, start_new_session=True)  # signals reach it through _forward, once
    while True:
        try:
            return _child.wait()
        except InterruptedError:
            continue


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rubin.launch.agent", description=__doc__.splitlines()[0])
    p.add_argument("--run-dir", required=True, help="the run's shared folder (its summary says how an attempt ended)")
    p.add_argument("--rejoin-s", type=float, default=600.0, help="how long to wait for a lost rendezvous host (launch.rejoin_timeout_s)")
    p.add_argument("--rejoins", type=int, default=3, help="fresh starts after the rendezvous was lost (launch.max_restarts)")
    p.add_argument("--same-machine", action="store_true", help="every node runs on this machine (a loopback endpoint is right)")
    p.add_argument("torchrun", nargs=argparse.REMAINDER, help="-- then torchrun's arguments")
    args = p.parse_args(argv)
    torchrun = args.torchrun[1:] if args.torchrun[:1] == ["--"] else args.torchrun
    for s in FORWARDED:
        signal.signal(s, _forward)
    try:
        return run(torchrun, args.run_dir, rejoin_s=args.rejoin_s, rejoins=args.rejoins, same_machine=args.same_machine)
    except UsageError as err:
        print(redact(f"rubin: error: {err}"), file=sys.stderr, flush=True)
        return int(ExitCode.USAGE)


if __name__ == "__main__":
    raise SystemExit(main())
