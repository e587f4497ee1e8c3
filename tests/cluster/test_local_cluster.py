"""The emulated cluster itself: hosts that are separate machines to the programs on them, each fault
injector observed from another host, and nothing left behind."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clusterkit import ROOT, leftovers, local_cluster, needs_cluster

pytestmark = [needs_cluster(), pytest.mark.slow]
PROBE = str(Path(__file__).with_name("netprobe.py"))
PY = sys.executable


def probe(c, host, *args, timeout=60) -> str:
    r = c.run(host, [PY, PROBE, *map(str, args)], timeout=timeout)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@contextlib.contextmanager
def serving(c, host, port, *, kind="serve", extra=()):
    proc = c.popen(host, [PY, PROBE, kind, str(port), *map(str, extra)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "listening"
        yield proc
    finally:
        local_cluster.stop(proc)


def test_each_host_is_a_machine_of_its_own(cluster_of):
    c = cluster_of(3)
    names = {}
    for h in c.hosts:
        out = c.run(h.name, [PY, "-c", "import socket, os; n = socket.gethostname(); "
                             "print(n, socket.gethostbyname(n), len([p for p in os.listdir('/proc') if p.isdigit()]))"])
        name, addr, nproc = out.stdout.split()
        names[name] = addr
        assert int(nproc) <= 3, "a host sees only its own processes"  # its init, python, and nothing else
    assert names == {h.name: h.addr for h in c.hosts}
    # /tmp is each host's own; the shared folder is the same on all.
    c.run("nodeA", ["sh", "-c", f"echo a > /tmp/mine && echo a > {c.shared}/ours"])
    assert c.run("nodeB", ["cat", "/tmp/mine"]).returncode != 0
    assert c.run("nodeB", ["cat", f"{c.shared}/ours"]).stdout == "a\n"
    assert not Path("/tmp/mine").exists()


def test_crash_kills_everything_on_the_host_and_revive_brings_back_an_empty_one(cluster_of):
    c = cluster_of(2)
    sleeper = c.popen("nodeB", ["sh", "-c", "sleep 600 & sleep 600 & wait"])
    other = c.popen("nodeA", ["sleep", "600"])
    try:
        deadline = time.monotonic() + 20
        while len(c.pids("nodeB")) < 3:  # sh and its two sleeps
            assert time.monotonic() < deadline, c.pids("nodeB")
            time.sleep(0.05)
        victims = c.pids("nodeB")
        c.inject("nodeB", "crash")
        assert sleeper.wait(10) != 0
        assert not any(local_cluster._alive(p) for p in victims)
        assert other.poll() is None, "a crash kills one host only"
        assert c.run("nodeA", ["true"]).returncode == 0
        with pytest.raises(local_cluster.ClusterError, match="nodeB is down"):
            c.run("nodeB", ["true"])
        c.revive("nodeB")
        assert c.pids("nodeB") == []
        assert c.run("nodeB", ["hostname"]).stdout.strip() == "nodeB"
    finally:
        local_cluster.stop(other)


def test_network_faults_as_seen_from_a_peer(cluster_of):
    c = cluster_of(2)
    with serving(c, "nodeB", 5000):
        assert probe(c, "nodeA", "connect", "nodeB", 5000).startswith("ok")
        c.inject("nodeB", "close", "5000")
        assert probe(c, "nodeA", "connect", "nodeB", 5000) == "refused"
        c.heal("nodeB", "close")
        c.inject("nodeB", "blackhole", "5000")
        assert probe(c, "nodeA", "connect", "nodeB", 5000) == "timeout"
        c.heal("nodeB")
        c.inject("nodeB", "partition")
        assert probe(c, "nodeA", "connect", "nodeB", 5000) == "timeout"
        c.heal("nodeB")
        assert probe(c, "nodeA", "connect", "nodeB", 5000).startswith("ok")
        assert c.host("nodeB").faults() == {}


def test_bandwidth_cap_holds_both_ways(cluster_of):
    c = cluster_of(2)
    with serving(c, "nodeB", 5000), serving(c, "nodeA", 5001):
        free = float(probe(c, "nodeA", "connect", "nodeB", 5000, 20_000_000).split()[1])
        c.inject("nodeB", "cap", "50mbit")
        towards = float(probe(c, "nodeA", "connect", "nodeB", 5000, 5_000_000).split()[1])
        away = float(probe(c, "nodeB", "connect", "nodeA", 5001, 5_000_000).split()[1])
    assert towards < 60 and away < 60, (towards, away)
    assert free > 5 * towards, (free, towards)


def test_random_loss_drops_about_that_share(cluster_of):
    c = cluster_of(2)
    c.inject("nodeB", "loss", "50")
    with serving(c, "nodeB", 6000, kind="udp-recv", extra=(3,)) as recv:
        probe(c, "nodeA", "udp-send", "nodeB", 6000, 2000, 100)
        got = int(recv.stdout.readline())
    # 2000 sent; the first one to arrive starts the count. Binomial(2000, 0.5): 3 sigma is about 67.
    assert 700 < got < 1300, got


def test_mtu_mismatch_drops_large_frames_only(cluster_of):
    c = cluster_of(2)
    c.inject("nodeB", "mtu", "9000")
    assert "mtu 9000" in c.run("nodeB", ["ip", "link", "show", "eth0"]).stdout
    with serving(c, "nodeA", 6001, kind="udp-recv", extra=(2,)) as recv:
        probe(c, "nodeB", "udp-send", "nodeA", 6001, 20, 4000)  # fits nodeB's MTU, not the fabric's
        probe(c, "nodeB", "udp-send", "nodeA", 6001, 20, 1000)
        assert int(recv.stdout.readline()) == 20, "only the small datagrams arrive"


def test_clock_offset_shifts_only_that_host(cluster_of):
    c = cluster_of(2)
    c.inject("nodeB", "clock", "+45s")
    now = [float(c.run(h, [PY, "-c", "import time; print(time.time())"]).stdout) for h in ("nodeA", "nodeB")]
    assert 40 < now[1] - now[0] < 50, now
    assert abs(now[0] - time.time()) < 5


def test_bad_hosts_entry_on_one_host(cluster_of):
    c = cluster_of(2)
    c.inject("nodeB", "hosts-entry", "127.0.1.1 nodeB")
    resolve = [PY, "-c", "import socket; print(socket.gethostbyname('nodeB'))"]
    assert c.run("nodeB", resolve).stdout.strip() == "127.0.1.1"
    assert c.run("nodeA", resolve).stdout.strip() == c.host("nodeB").addr
    c.heal("nodeB")
    assert c.run("nodeB", resolve).stdout.strip() == c.host("nodeB").addr


def test_a_dead_owner_takes_its_cluster_down():
    name = f"t{os.getpid()}-owned"
    owner = subprocess.Popen([PY, "-c", "import time; time.sleep(600)"])
    c = local_cluster.Cluster(name)
    try:
        c.up(2, owner=owner.pid)
        c.popen("nodeA", ["sleep", "600"])
        assert c.exists()
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + 30
        while leftovers(c):
            assert time.monotonic() < deadline, f"still there: {leftovers(c)}"
            time.sleep(0.2)
    finally:
        owner.kill()
        c.down()


@pytest.mark.parametrize("args, says", [
    (["nodeZ", "true"], "host 'nodeZ' is not in cluster"),
    (["nodeA"], "exec needs a command"),
])
def test_exec_bad_input_is_one_line(cluster_of, args, says):
    c = cluster_of(1)
    r = subprocess.run(["bash", str(ROOT / "scripts/local-cluster.sh"), "--name", c.name, "exec", *args], capture_output=True, text=True)
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize("fault, arg, says", [
    ("close", "http", "close PORT='http' is not valid"),
    ("cap", "fast", "cap RATE='fast' is not valid"),
    ("loss", "150", "loss PCT='150' is not valid"),
    ("clock", "30s", "clock OFFSET='30s' is not valid"),
    ("hosts-entry", "nodeB", "hosts-entry 'nodeB' is not valid"),
])
def test_fault_bad_input_is_one_line_and_changes_nothing(cluster_of, fault, arg, says):
    c = cluster_of(1)
    r = subprocess.run(["bash", str(ROOT / "scripts/local-cluster.sh"), "--name", c.name, fault, "nodeA", arg],
                       capture_output=True, text=True)
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert c.host("nodeA").faults() == {}
