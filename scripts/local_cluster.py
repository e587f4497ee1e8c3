"""An emulated cluster on one machine: hosts as Linux namespaces on one bridge, and faults to put on them.

Each host has its own network namespace (an ``eth0`` on a bridge, its own address), its own hostname
(UTS namespace), its own ``/etc/hosts``, ``/tmp`` and ``/dev/shm`` (mount namespace) and its own PID
namespace, so killing a host kills everything on it, as when a machine dies. One folder, the same path
on every host, plays the cluster's shared filesystem. Needs root (namespaces, nftables, tc).

    local-cluster.sh up N [--name C] [--owner PID]   hosts nodeA, nodeB, ... on 10.77.K.0/24
    local-cluster.sh down [--name C] [--stale]      every process, namespace and mount of the cluster goes
    local-cluster.sh exec HOST CMD...               CMD on HOST, in this folder, with this environment
    local-cluster.sh list                           the hosts: name, address, state, faults
    local-cluster.sh FAULT HOST [ARG]               put a fault on HOST (the table FAULTS below)
    local-cluster.sh heal HOST [FAULT]              take one fault, or all, off HOST
    local-cluster.sh revive HOST                    a replacement for a crashed host: same name and address

``--owner PID`` ties the cluster to a process: when it exits, however it exits, a reaper takes the
cluster down, so a test that times out or crashes leaves nothing behind.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(os.environ.get("RUBIN_CLUSTER_ROOT", "/srv/rubin-cluster"))
SUBNET = "10.77"
MTU = 1500
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
NAMES = [f"node{chr(ord('A') + i)}" for i in range(26)]


class ClusterError(Exception):
    """A bad request or a host that cannot be made: one line for the user."""


def sh(*argv: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, input=input)
    if check and proc.returncode != 0:
        raise ClusterError(f"{' '.join(argv)}: {(proc.stderr or proc.stdout).strip() or f'exit {proc.returncode}'}")
    return proc


# ---------------------------------------------------------------------------------------------- state

@dataclass
class Host:
    name: str
    addr: str
    ns: str
    dir: Path

    @property
    def init_pid(self) -> int | None:
        try:
            pid = int((self.dir / "init.pid").read_text())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def faults(self) -> dict:
        try:
            return json.loads((self.dir / "faults.json").read_text())
        except (OSError, ValueError):
            return {}

    def set_faults(self, faults: dict) -> None:
        _write(self.dir / "faults.json", json.dumps(faults, sort_keys=True))


class Cluster:
    def __init__(self, name: str = "rc"):
        self.name = name
        self.dir = ROOT / name
        self.shared = self.dir / "shared"

    # -- the record
    def _state(self) -> dict:
        try:
            return json.loads((self.dir / "cluster.json").read_text())
        except (OSError, ValueError):
            raise ClusterError(f"no cluster {self.name!r} (no {self.dir}/cluster.json): start it with local-cluster.sh up N") from None

    def exists(self) -> bool:
        return (self.dir / "cluster.json").exists()

    @property
    def hosts(self) -> list[Host]:
        st = self._state()
        return [Host(n, f"{SUBNET}.{st['index']}.{i + 1}", f"{self.name}-{n}", self.dir / "hosts" / n)
                for i, n in enumerate(st["hosts"])]

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise ClusterError(f"host {name!r} is not in cluster {self.name!r}: its hosts are {', '.join(h.name for h in self.hosts)}")

    @property
    def fabric(self) -> str:
        return f"{self.name}-fabric"

    def owner(self) -> int | None:
        return self._state().get("owner")

    # -- up and down
    def up(self, n: int, owner: int | None = None) -> None:
        if not 1 <= n <= len(NAMES):
            raise ClusterError(f"N={n} is not valid: a cluster has 1 to {len(NAMES)} hosts")
        if os.geteuid() != 0:
            raise ClusterError("needs root: hosts are network, PID and mount namespaces")
        ROOT.mkdir(parents=True, exist_ok=True)
        with _locked(ROOT / ".lock"):
            if self.exists():
                raise ClusterError(f"cluster {self.name!r} is already up ({self.dir}): take it down first, or pick --name")
            used = {_index(p) for p in ROOT.iterdir() if (p / "cluster.json").exists()}
            index = next(i for i in range(1, 255) if i not in used)
            self.shared.mkdir(parents=True, exist_ok=True)
            self.shared.chmod(0o1777)
            _write(self.dir / "cluster.json", json.dumps({"name": self.name, "index": index, "hosts": NAMES[:n], "owner": owner}))
        try:
            sh("ip", "netns", "add", self.fabric)
            sh("ip", "-n", self.fabric, "link", "set", "lo", "up")
            sh("ip", "-n", self.fabric, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", self.fabric, "link", "set", "br0", "up")
            for h in self.hosts:
                self._make_host(h)
        except BaseException:
            self.down()
            raise
        if owner:
            subprocess.Popen([sys.executable, __file__, "--name", self.name, "_reap", "--owner", str(owner)],
                             start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _make_host(self, h: Host) -> None:
        h.dir.mkdir(parents=True, exist_ok=True)
        _write(h.dir / "hosts", self.hosts_file())
        sh("ip", "netns", "add", h.ns)
        sh("ip", "link", "add", "eth0", "netns", h.ns, "type", "veth", "peer", "name", _port(h), "netns", self.fabric)
        sh("ip", "-n", self.fabric, "link", "set", _port(h), "master", "br0", "up")
        sh("ip", "-n", h.ns, "addr", "add", f"{h.addr}/24", "dev", "eth0")
        for dev in ("lo", "eth0"):
            sh("ip", "-n", h.ns, "link", "set", dev, "up")
        self._boot(h)

    def _boot(self, h: Host) -> None:
        """Start the host's PID namespace: its init holds the hostname and the mounts while it lives."""
        init = (f"mount --bind {h.dir}/hosts /etc/hosts && mount -t tmpfs -o size=512m tmpfs /tmp && "
                f"mount -t tmpfs -o size=512m tmpfs /dev/shm && hostname {h.name} && exec sleep infinity")
        proc = subprocess.Popen(["ip", "netns", "exec", h.ns, "unshare", "--fork", "--pid", "--mount-proc", "--mount", "--uts",
                                 "--kill-child=SIGKILL", "--", "sh", "-c", init],
                                start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            kids = _children(proc.pid)
            if kids and sh("nsenter", "-t", str(kids[0]), "-u", "hostname", check=False).stdout.strip() == h.name:
                _write(h.dir / "init.pid", str(kids[0]))
                return
            if proc.poll() is not None:
                raise ClusterError(f"host {h.name} did not start: {proc.stderr.read().decode().strip()}")
            time.sleep(0.05)
        raise ClusterError(f"host {h.name} did not start within 20 s")

    def hosts_file(self) -> str:
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        return "\n".join(lines + [f"{h.addr} {h.name}" for h in self.hosts]) + "\n"

    def down(self) -> None:
        """Everything of the cluster goes: processes (with their PID namespaces), mounts, namespaces, the folder."""
        hosts = self.hosts if self.exists() else []
        for h in hosts:
            self._kill(h)
        for ns in [h.ns for h in hosts] + [self.fabric]:
            sh("ip", "netns", "del", ns, check=False)
        # Namespaces of a half-made cluster that never wrote its record.
        for ns in sh("ip", "netns", "list", check=False).stdout.split("\n"):
            name = ns.split(" ")[0]
            if name.startswith(f"{self.name}-"):
                sh("ip", "netns", "del", name, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def _kill(self, h: Host) -> None:
        pid = h.init_pid
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # PID 1 of the namespace: the kernel kills every process in it
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        (h.dir / "init.pid").unlink(missing_ok=True)

    # -- running things on a host
    def command(self, host: str, argv: list[str], cwd: str | None = None) -> list[str]:
        """The argv that runs ARGV on HOST (its namespaces, its clock)."""
        h = self.host(host)
        pid = h.init_pid
        if pid is None:
            raise ClusterError(f"host {host} is down (crashed): revive it first (local-cluster.sh revive {host})")
        env = []
        offset = h.faults().get("clock")
        if offset:
            # A constant shift of every clock: time.sleep fails (EINVAL) in libfaketime 0.9.10 when monotonic
            # clocks are left unfaked, and a constant offset on them changes no interval.
            env = ["env", f"LD_PRELOAD={FAKETIME_LIB}", f"FAKETIME={offset}"]
        return ["nsenter", "-t", str(pid), "-n", "-m", "-u", "-p", f"--wd={cwd or os.getcwd()}", "--", *env, *argv]

    def run(self, host: str, argv: list[str], timeout: float = 60, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(host, argv), capture_output=True, text=True, timeout=timeout, **kw)

    def popen(self, host: str, argv: list[str], **kw) -> subprocess.Popen:
        """ARGV started on HOST; ``signal_command`` reaches it (a signal to the Popen reaches only nsenter)."""
        return subprocess.Popen(self.command(host, argv), **kw)

    def pids(self, host: str) -> list[int]:
        """Every process on HOST but its init, as this machine numbers them (the ones in its PID namespace:
        what ``exec`` starts enters the namespace without descending from its init)."""
        init = self.host(host).init_pid
        if init is None:
            return []
        ns = _pid_ns(init)
        return sorted(p for p in _all_pids() if p != init and _pid_ns(p) == ns)

    # -- faults
    def inject(self, host: str, fault: str, arg: str | None = None) -> None:
        if fault not in FAULTS:
            raise ClusterError(f"fault {fault!r} is not known: allowed are {', '.join(FAULTS)}")
        FAULTS[fault].apply(self, self.host(host), arg)

    def heal(self, host: str, fault: str | None = None) -> None:
        h = self.host(host)
        names = [fault] if fault else list(h.faults())
        for name in names:
            if name not in FAULTS or FAULTS[name].heal is None:
                raise ClusterError(f"fault {name!r} cannot be healed: allowed are {', '.join(k for k, f in FAULTS.items() if f.heal)}")
        for name in names:
            FAULTS[name].heal(self, h)

    def revive(self, host: str) -> None:
        h = self.host(host)
        if h.init_pid is not None:
            raise ClusterError(f"host {host} is running: crash it first (local-cluster.sh crash {host})")
        h.set_faults({})
        _nft(self, h)
        sh("ip", "-n", h.ns, "link", "set", "eth0", "mtu", str(MTU))
        sh("ip", "-n", self.fabric, "link", "set", _port(h), "up")
        _write(h.dir / "hosts", self.hosts_file())
        self._boot(h)


# ---------------------------------------------------------------------------------------------- faults

@dataclass(frozen=True)
class Fault:
    """One fault injector: what it does, how it is put on a host, and how it is taken off."""

    name: str
    arg: str | None  # the argument's name, or None
    help: str
    apply: object
    heal: object = None


def _record(h: Host, name: str, value) -> None:
    f = h.faults()
    f[name] = value
    h.set_faults(f)


def _drop(h: Host, name: str) -> None:
    f = h.faults()
    f.pop(name, None)
    h.set_faults(f)


def _nft(c: Cluster, h: Host) -> None:
    """Rebuild the host's fault table from its record: one table, so healing never leaves a stray rule."""
    f = h.faults()
    rules = []
    if f.get("partition"):
        rules += ['input iifname "eth0" drop', 'output oifname "eth0" drop']
    for port in f.get("close", []):
        rules.append(f'input iifname "eth0" tcp dport {port} reject with tcp reset')
    for port in f.get("blackhole", []):
        rules.append(f'input iifname "eth0" tcp dport {port} drop')
    if f.get("loss"):
        pct = int(f["loss"])
        rules += [f'input iifname "eth0" numgen random mod 100 < {pct} drop',
                  f'output oifname "eth0" numgen random mod 100 < {pct} drop']
    sh("ip", "netns", "exec", h.ns, "nft", "delete", "table", "inet", "rubin_faults", check=False)
    if rules:
        text = ("table inet rubin_faults {\n chain input { type filter hook input priority 0; policy accept; }\n"
                " chain output { type filter hook output priority 0; policy accept; }\n}\n"
                + "".join(f"add rule inet rubin_faults {r}\n" for r in rules))
        sh("ip", "netns", "exec", h.ns, "nft", "-f", "-", input=text)


def _port_arg(arg: str | None, fault: str) -> int:
    if not arg or not arg.isdigit() or not 0 < int(arg) < 65536:
        raise ClusterError(f"{fault} PORT={arg!r} is not valid: give a TCP port, 1-65535, e.g. local-cluster.sh {fault} nodeB 29500")
    return int(arg)


def crash(c: Cluster, h: Host, arg: str | None) -> None:
    """Every process on the host dies at once. With 'silent' its link goes down first: a power loss, where
    peers see packets vanish, not connections closed."""
    if arg not in (None, "silent"):
        raise ClusterError(f"crash {arg!r} is not valid: allowed is nothing or 'silent' (the link goes down first)")
    if arg == "silent":
        sh("ip", "-n", c.fabric, "link", "set", _port(h), "down")
    c._kill(h)


def partition(c: Cluster, h: Host, arg: str | None) -> None:
    _record(h, "partition", True)
    _nft(c, h)


def port_fault(name: str):
    def apply(c: Cluster, h: Host, arg: str | None) -> None:
        port = _port_arg(arg, name)
        _record(h, name, sorted(set(h.faults().get(name, [])) | {port}))
        _nft(c, h)
    return apply


def loss(c: Cluster, h: Host, arg: str | None) -> None:
    if not arg or not arg.isdigit() or not 0 < int(arg) <= 100:
        raise ClusterError(f"loss PCT={arg!r} is not valid: give a percentage of packets to drop, 1-100, e.g. 5")
    _record(h, "loss", int(arg))
    _nft(c, h)


def nft_heal(name: str):
    def heal(c: Cluster, h: Host) -> None:
        _drop(h, name)
        _nft(c, h)
    return heal


def cap(c: Cluster, h: Host, arg: str | None) -> None:
    """A bandwidth cap both ways: tbf on the host's eth0 (out) and on its bridge port (in)."""
    if not arg or not arg.rstrip("kmgbit").replace(".", "").isdigit() or not arg.endswith("bit"):
        raise ClusterError(f"cap RATE={arg!r} is not valid: give a rate as tc writes it, e.g. 100mbit or 500kbit")
    for ns, dev in ((h.ns, "eth0"), (c.fabric, _port(h))):
        sh("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", arg,
           "burst", "256kb", "latency", "200ms")
    _record(h, "cap", arg)


def cap_heal(c: Cluster, h: Host) -> None:
    for ns, dev in ((h.ns, "eth0"), (c.fabric, _port(h))):
        sh("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root", check=False)
    _drop(h, "cap")


def mtu(c: Cluster, h: Host, arg: str | None) -> None:
    """The host's own MTU, against the fabric's 1500: large frames from it are dropped on the way."""
    if not arg or not arg.isdigit() or not 576 <= int(arg) <= 65000:
        raise ClusterError(f"mtu {arg!r} is not valid: give an MTU of 576-65000, e.g. 9000")
    sh("ip", "-n", h.ns, "link", "set", "eth0", "mtu", arg)
    _record(h, "mtu", int(arg))


def mtu_heal(c: Cluster, h: Host) -> None:
    sh("ip", "-n", h.ns, "link", "set", "eth0", "mtu", str(MTU))
    _drop(h, "mtu")


def clock(c: Cluster, h: Host, arg: str | None) -> None:
    """The host's wall clock, shifted for what starts on it from now on (libfaketime)."""
    if not arg or arg[0] not in "+-" or not arg[1:].rstrip("smhd").replace(".", "").isdigit():
        raise ClusterError(f"clock OFFSET={arg!r} is not valid: give a signed offset, e.g. +30s, -2m or +1h")
    if not Path(FAKETIME_LIB).exists():
        raise ClusterError(f"clock needs libfaketime ({FAKETIME_LIB}): apt-get install faketime")
    _record(h, "clock", arg)


def hosts_entry(c: Cluster, h: Host, arg: str | None) -> None:
    """A line in the host's /etc/hosts that replaces the lines for its names, e.g. '127.0.1.1 nodeB';
    ADDRESS '-' removes them, so the names do not resolve there."""
    parts = (arg or "").split()
    if len(parts) < 2:
        raise ClusterError(f"hosts-entry {arg!r} is not valid: give 'ADDRESS NAME...', e.g. '127.0.1.1 nodeB' ('- nodeB' removes it)")
    names = set(parts[1:])
    kept = [ln for ln in (h.dir / "hosts").read_text().splitlines() if not names & set(ln.split()[1:])]
    added = [" ".join(parts)] if parts[0] != "-" else []
    _overwrite(h.dir / "hosts", "\n".join(kept + added) + "\n")
    _record(h, "hosts-entry", sorted(set(h.faults().get("hosts-entry", [])) | {" ".join(parts)}))


def hosts_heal(c: Cluster, h: Host) -> None:
    _overwrite(h.dir / "hosts", c.hosts_file())
    _drop(h, "hosts-entry")


def readonly(c: Cluster, h: Host, arg: str | None) -> None:
    """PATH (a folder every host sees, e.g. the shared folder) read-only on this host only: a filesystem
    mounted read-only there. A bind mount in the host's own mount namespace, so no other host sees it."""
    if not arg or not Path(arg).is_dir():
        raise ClusterError(f"readonly PATH={arg!r} is not valid: give a folder every host sees, e.g. the shared folder")
    pid = h.init_pid
    if pid is None:
        raise ClusterError(f"host {h.name} is down: revive it first")
    sh("nsenter", "-t", str(pid), "-m", "--", "mount", "--bind", arg, arg)
    sh("nsenter", "-t", str(pid), "-m", "--", "mount", "-o", "remount,bind,ro", arg)
    _record(h, "readonly", sorted(set(h.faults().get("readonly", [])) | {arg}))


def readonly_heal(c: Cluster, h: Host) -> None:
    pid = h.init_pid
    for path in h.faults().get("readonly", []) if pid else []:
        sh("nsenter", "-t", str(pid), "-m", "--", "umount", path, check=False)
    _drop(h, "readonly")


FAULTS = {f.name: f for f in (
    Fault("crash", "[silent]", "every process on HOST dies; 'silent': its link goes down first (a power loss)", crash),
    Fault("partition", None, "drop every packet in and out of HOST: a silent partition", partition, nft_heal("partition")),
    Fault("close", "PORT", "refuse TCP connections to PORT on HOST (a closed port: RST)", port_fault("close"), nft_heal("close")),
    Fault("blackhole", "PORT", "drop packets to TCP PORT on HOST (a firewall black hole)", port_fault("blackhole"),
          nft_heal("blackhole")),
    Fault("cap", "RATE", "cap HOST's bandwidth both ways (tbf), e.g. 100mbit", cap, cap_heal),
    Fault("loss", "PCT", "drop PCT % of HOST's packets at random, both ways (nftables numgen)", loss, nft_heal("loss")),
    Fault("mtu", "MTU", "set HOST's interface MTU (the fabric stays at 1500)", mtu, mtu_heal),
    Fault("clock", "OFFSET", "shift HOST's wall clock for what starts on it from now on, e.g. +30s", clock,
          lambda c, h: _drop(h, "clock")),
    Fault("hosts-entry", "'ADDR NAME'", "a bad /etc/hosts line on HOST, e.g. '127.0.1.1 nodeB' ('- nodeB': no line)",
          hosts_entry, hosts_heal),
    Fault("readonly", "PATH", "PATH read-only on HOST only (a filesystem mounted read-only there)", readonly, readonly_heal),
)}


# ---------------------------------------------------------------------------------------------- helpers

def _port(h: Host) -> str:
    return f"p-{h.name}"  # the host's end of the wire on the bridge, in the fabric namespace


def _index(p: Path) -> int:
    try:
        return json.loads((p / "cluster.json").read_text())["index"]
    except (OSError, ValueError, KeyError):
        return -1


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _overwrite(path: Path, text: str) -> None:
    """In place: a bind-mounted file must keep its inode."""
    with open(path, "r+") as f:
        f.write(text)
        f.truncate()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _all_pids() -> list[int]:
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


def _pid_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def reap(name: str, owner: int) -> None:
    """Wait for the owner to exit, then take the cluster down."""
    c = Cluster(name)
    while _alive(owner) and c.exists():
        time.sleep(0.5)
    if c.exists() and c.owner() == owner:
        c.down()


def down_stale() -> list[str]:
    """Take down every cluster whose owner has exited (a reaper that was itself killed)."""
    gone = []
    for p in sorted(ROOT.iterdir()) if ROOT.exists() else []:
        if (p / "cluster.json").exists():
            c = Cluster(p.name)
            owner = c.owner()
            if owner and not _alive(owner):
                c.down()
                gone.append(p.name)
    return gone


def signal_command(proc: subprocess.Popen, signum: int) -> None:
    """Send SIGNUM to the command that PROC (an nsenter line) runs on its host."""
    for pid in _children(proc.pid) or [proc.pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def stop(proc: subprocess.Popen, timeout: float = 10) -> None:
    """End the command PROC runs on its host: TERM, then KILL, and reap nsenter."""
    if proc.poll() is None:
        signal_command(proc, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            signal_command(proc, signal.SIGKILL)
            proc.kill()
            proc.wait()


def exec_forwarding(argv: list[str]) -> int:
    """Run ARGV (an nsenter line) and pass the signals we get to the command on the host."""
    proc = subprocess.Popen(argv)

    def forward(signum, frame):
        signal_command(proc, signum)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(s, forward)
    while True:
        try:
            code = proc.wait()
            break
        except InterruptedError:
            continue
    return code if code >= 0 else 128 - code


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="local-cluster.sh", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="faults:\n" + "\n".join(f"  {f.name} HOST {f.arg or ''}".ljust(32) + f.help
                                                               for f in FAULTS.values()))
    p.add_argument("--name", default=os.environ.get("RUBIN_CLUSTER", "rc"), help="the cluster's name (default: $RUBIN_CLUSTER or rc)")
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up")
    up.add_argument("n", type=int)
    up.add_argument("--owner", type=int)
    down = sub.add_parser("down")
    down.add_argument("--stale", action="store_true", help="every cluster whose owner process has exited")
    ex = sub.add_parser("exec")
    ex.add_argument("host")
    ex.add_argument("argv", nargs=argparse.REMAINDER)
    sub.add_parser("list")
    heal = sub.add_parser("heal")
    heal.add_argument("host")
    heal.add_argument("fault", nargs="?")
    rev = sub.add_parser("revive")
    rev.add_argument("host")
    reaper = sub.add_parser("_reap")
    reaper.add_argument("--owner", type=int, required=True)
    for f in FAULTS.values():
        fp = sub.add_parser(f.name, help=f.help.replace("%", "%%"))
        fp.add_argument("host")
        fp.add_argument("arg", nargs="?")
    args = p.parse_args(argv)
    c = Cluster(args.name)
    try:
        if args.cmd == "up":
            c.up(args.n, owner=args.owner)
            for h in c.hosts:
                print(f"{h.name} {h.addr}")
            print(f"shared folder: {c.shared}")
        elif args.cmd == "down":
            gone = down_stale() if args.stale else (c.down() or [args.name])
            print(f"down: {' '.join(gone) or 'nothing'}")
        elif args.cmd == "exec":
            cmd = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
            if not cmd:
                raise ClusterError("exec needs a command: local-cluster.sh exec HOST CMD...")
            return exec_forwarding(c.command(args.host, cmd))
        elif args.cmd == "list":
            for h in c.hosts:
                state = "up" if h.init_pid else "down"
                print(f"{h.name} {h.addr} {state} {json.dumps(h.faults(), sort_keys=True) if h.faults() else ''}".rstrip())
        elif args.cmd == "heal":
            c.heal(args.host, args.fault)
        elif args.cmd == "revive":
            c.revive(args.host)
        elif args.cmd == "_reap":
            reap(args.name, args.owner)
        else:
            c.inject(args.host, args.cmd, args.arg)
    except ClusterError as err:
        print(f"local-cluster: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
