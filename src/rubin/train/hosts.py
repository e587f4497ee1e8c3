"""Which rank runs on which host, and what a multi-host job checks and says because of it.

- ``socket_interfaces``: before the group forms, the interface Gloo and NCCL bind to, chosen from the
  route to the rendezvous host when unset (a hostname that resolves to 127.0.1.1 otherwise makes Gloo
  bind to loopback) and checked when set.
- ``exchange``: once the group forms, every rank's host, address and clock, gathered by every rank.
  A clock off by more than torchrun's heartbeat margin is refused before the first step.
- ``lost_peer``: a collective that failed because a peer went away becomes one line that names the
  rank, its host and the step, with the exit code that asks for a retry (75), never "internal error".
"""

from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass, field

from rubin.errors import ExitCode, RubinError, UsageError
from rubin.platform import network

# torchrun's c10d rendezvous drops a node whose last heartbeat is older than keep_alive_interval x
# keep_alive_max_attempt (5 s x 3, torch/distributed/elastic/rendezvous/dynamic_rendezvous.py), judged
# by the reader's own clock. A heartbeat can be up to one interval old, so a clock more than 15 - 5 = 10 s
# off can make a healthy node look dead at the next rendezvous.
HEARTBEAT_MARGIN_S = 10.0
CLOCK_WARN_S = 1.0
SOCKET_VARS = {"gloo": "GLOO_SOCKET_IFNAME", "nccl": "NCCL_SOCKET_IFNAME"}


@dataclass
class Hosts:
    """Rank -> host name and address, and each rank's clock offset from rank 0 (seconds, with its uncertainty)."""

    names: dict[int, str] = field(default_factory=dict)
    addrs: dict[int, str] = field(default_factory=dict)
    offsets: dict[int, tuple[float, float]] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return len(set(self.names.values())) or 1

    def describe(self, rank: int) -> str:
        host = self.names.get(rank)
        if host is None:
            return f"rank {rank}"
        addr = self.addrs.get(rank)
        return f"rank {rank} on {host}" + (f" ({addr})" if addr and addr != host else "")

    def rank_at(self, addr: str) -> int | None:
        """The rank whose host has ADDR (the lowest, when a host runs several)."""
        found = [r for r, a in self.addrs.items() if a == addr]
        return min(found) if found else None


# ------------------------------------------------------------------------------------- before the group

def spans_hosts(env=os.environ) -> bool:
    """Whether this torchrun job has ranks on other machines (torchrun's LOCAL_WORLD_SIZE below WORLD_SIZE)."""
    try:
        return int(env.get("LOCAL_WORLD_SIZE", env.get("WORLD_SIZE", "1"))) < int(env.get("WORLD_SIZE", "1"))
    except ValueError:
        return False


def check_socket_vars(env=os.environ) -> None:
    """A set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME must name an interface of this host that has an address."""
    have = None
    for var in SOCKET_VARS.values():
        if env.get(var):
            have = have or network.interfaces()
            _check_interface(var, env[var], have)


def socket_interfaces(backend: str, env=os.environ) -> list[str]:
    """Set the backend's socket interface when unset, for a job with ranks on other hosts; check it when set.

    Unset, it becomes the interface of this host's route to the rendezvous host (MASTER_ADDR). On the
    rendezvous host itself, whose name may resolve to 127.0.1.1 there, it is the one interface with an
    address that is not loopback. Returns what was chosen, as lines to show.
    """
    var = SOCKET_VARS.get(backend)
    master = env.get("MASTER_ADDR")
    if var is None or not master or not spans_hosts(env):
        return []
    check_socket_vars(env)
    if env.get(var):
        return []
    route = network.route_to(master)
    if route is None:
        raise UsageError(f"MASTER_ADDR={master!r} does not resolve or has no route from {network.hostname()}: the rendezvous "
                         f"host must be reachable by name from every node; fix this host's /etc/hosts or DNS, or set {var}")
    iface, src = route.iface, route.src
    if iface is None or network.is_loopback(src):  # this is the rendezvous host, and its name resolves to loopback here
        outward = [i for i in network.interfaces().values() if i.addr and not network.is_loopback(i.addr)]
        if len(outward) != 1:
            raise UsageError(f"{master} resolves to {route.dest} (loopback) on {network.hostname()}, and the other nodes must reach "
                             f"it: set {var} to the interface of the cluster network (this host has "
                             f"{', '.join(i.name for i in outward) or 'none with an address'}) or fix its /etc/hosts")
        iface, src = outward[0].name, outward[0].addr
    env[var] = iface
    why = ""
    mine = network.resolve(network.hostname())
    if network.is_loopback(mine):
        why = f" ({network.hostname()} resolves to {mine}, which Gloo would bind to)"
    return [f"{var} was not set: using {iface} ({src}), the interface of this host's route to {master}{why}"]


def _check_interface(var: str, value: str, have: dict) -> None:
    names = [v for v in value.lstrip("=").split(",") if v]
    if var == "NCCL_SOCKET_IFNAME" and value.startswith("^"):
        return  # an exclusion list: NCCL picks among the rest
    exact = var == "GLOO_SOCKET_IFNAME" or value.startswith("=")
    for name in names:
        found = [i for i in have.values() if (i.name == name if exact else i.name.startswith(name))]
        if not found:
            raise UsageError(f"{var}={value!r} is not valid on {network.hostname()}: it has no interface {name!r}; allowed are "
                             f"{', '.join(sorted(have))}; unset it (rubin then takes the route to the rendezvous host) "
                             "or name an interface every node has")
        if not any(i.addr for i in found):
            raise UsageError(f"{var}={value!r} is not valid on {network.hostname()}: interface {name!r} has no IPv4 address; "
                             "name the interface that carries the cluster network")


# ------------------------------------------------------------------------------------- once it formed

def exchange(world_size: int, rounds: int = 3) -> Hosts:
    """Every rank's host, address and clock, in a few small collectives (milliseconds on a LAN).

    Clock: after each of ROUNDS barriers every rank reads its wall clock. A barrier ends on every rank
    within one round trip, so rank r's offset from rank 0 is its reading minus rank 0's, uncertain by
    the larger of the two round trips; the round with the smallest round trip counts.
    """
    import torch.distributed as dist

    master = os.environ.get("MASTER_ADDR", "")
    route = network.route_to(master) if master else None
    me = {"host": socket.gethostname(), "addr": route.src if route else network.resolve(socket.gethostname())}
    samples = []
    for _ in range(rounds):
        t0 = time.monotonic()
        dist.barrier()
        samples.append((time.time(), time.monotonic() - t0))
    me["clock"] = samples
    table: list = [None] * world_size
    dist.all_gather_object(table, me)
    hosts = Hosts({r: t["host"] for r, t in enumerate(table)}, {r: t["addr"] for r, t in enumerate(table) if t["addr"]})
    for r, t in enumerate(table):
        best = min(range(rounds), key=lambda i: max(t["clock"][i][1], table[0]["clock"][i][1]))
        rtt = max(t["clock"][best][1], table[0]["clock"][best][1])
        hosts.offsets[r] = (t["clock"][best][0] - table[0]["clock"][best][0], rtt)
    return hosts


def check_clocks(hosts: Hosts) -> list[str]:
    """Refuse a clock off by more than the heartbeat margin (one line, naming the host); lines for smaller ones."""
    if hosts.count < 2:
        return []
    worst = max(hosts.offsets, key=lambda r: abs(hosts.offsets[r][0]))
    off, rtt = hosts.offsets[worst]
    where = f"{hosts.names.get(worst, '?')}'s clock is {abs(off):.1f} s {'ahead of' if off > 0 else 'behind'} {hosts.names[0]}'s"
    if abs(off) - rtt > HEARTBEAT_MARGIN_S:
        raise UsageError(f"clock: {where} (rank {worst} against rank 0, +/- {rtt * 1000:.0f} ms): torchrun's rendezvous drops a node "
                         f"whose heartbeat looks older than {HEARTBEAT_MARGIN_S:g} s, so a restart would evict a healthy node; sync the "
                         "clocks (chrony or ntpd on every node: chronyc tracking shows the offset) and start again")
    if abs(off) > CLOCK_WARN_S:
        return [f"clock: {where} (+/- {rtt * 1000:.0f} ms); torchrun tolerates up to {HEARTBEAT_MARGIN_S:g} s; sync the clocks"]
    return []


# ------------------------------------------------------------------------------------- a peer went away

class PeerLost(RubinError):
    """A collective failed because a peer went away. Exit 75: the job resumes from the last committed checkpoint."""

    exit_code = ExitCode.PREEMPTED
    exit_reason = "lost_peer"


# The words the backends use when the other end of a collective is gone (gloo, NCCL, the c10d store).
_PEER_GONE = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|remote process exited|ncclRemoteError|"
    r"Failed to recv, got 0 bytes|Socket Timeout|Timed out waiting \d+ms for (recv|send)|NCCL communicator was aborted|"
    r"Connection refused|No route to host|Network is unreachable", re.I)
_PEER_ADDR = re.compile(r"\[?((?:\d{1,3}\.){3}\d{1,3})\]?:(\d+)")


def lost_peer(err: BaseException, hosts: Hosts | None, rank: int, step: int, last_saved: int | None) -> PeerLost | None:
    """ERR as one line when a peer went away, else None. STEP is the last step this rank completed."""
    text = f"{type(err).__name__}: {err}"
    if not isinstance(err, (RuntimeError, OSError)) or not _PEER_GONE.search(text):
        return None
    hosts = hosts or Hosts()
    who = "a peer"
    m = _PEER_ADDR.search(str(err))
    if m:
        peer = hosts.rank_at(m.group(1))
        who = hosts.describe(peer) if peer is not None else f"the peer at {m.group(1)}"
    how = "stopped answering" if re.search(r"Timed out|Socket Timeout", text, re.I) else "closed its connection (it crashed or was killed)"
    here = hosts.describe(rank)
    resume = (f"the job resumes from step {last_saved}, the last committed checkpoint" if last_saved
              else "no checkpoint was committed yet: the job starts again from step 0")
    return PeerLost(f"lost {who} in step {step + 1}: it {how}; {here} stops (exit 75: retry): {resume}, when the job re-forms "
                    "(torchrun restarts it, or rerun the same command)")
