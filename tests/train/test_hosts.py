"""Which rank runs where, and the lines a multi-host job says because of it (train/hosts.py). The real
failures these parse are produced on emulated hosts in tests/cluster/test_node_loss.py."""

from __future__ import annotations

import pytest

from rubin.errors import ExitCode, UsageError
from rubin.train import hosts

TABLE = hosts.Hosts({0: "nodeA", 1: "nodeB"}, {0: "10.77.0.1", 1: "10.77.0.2"})
GLOO_CLOSED = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
               "[10.77.0.2]:64187. This is typically caused by a remote worker crashing.")


def test_a_peer_that_closed_its_connection_is_named_with_its_host_and_step():
    lost = hosts.lost_peer(RuntimeError(GLOO_CLOSED), TABLE, rank=0, step=209, last_saved=200)
    assert isinstance(lost, hosts.PeerLost) and lost.exit_code == ExitCode.PREEMPTED
    assert str(lost).startswith("lost rank 1 on nodeB (10.77.0.2) in step 210: it closed its connection")
    assert "rank 0 on nodeA (10.77.0.1) stops (exit 75: retry): the job resumes from step 200" in str(lost)


def test_a_timeout_in_a_collective_says_the_peer_stopped_answering():
    lost = hosts.lost_peer(RuntimeError("[gloo] Timed out waiting 60000ms for recv operation to complete"), TABLE, 1, 4, None)
    assert "lost a peer in step 5: it stopped answering" in str(lost) and "starts again from step 0" in str(lost)


@pytest.mark.parametrize("err", [ValueError("Connection closed by peer"), RuntimeError("CUDA out of memory"),
                                 KeyError("Connection reset by peer")])
def test_other_errors_are_left_alone(err):
    assert hosts.lost_peer(err, TABLE, 0, 1, None) is None


def test_a_clock_beyond_the_heartbeat_margin_is_refused_naming_the_host():
    table = hosts.Hosts(dict(TABLE.names), dict(TABLE.addrs), {0: (0.0, 0.001), 1: (40.2, 0.002)})
    with pytest.raises(UsageError, match=r"clock: nodeB's clock is 40.2 s ahead of nodeA's \(rank 1 against rank 0, \+/- 2 ms\)"):
        hosts.check_clocks(table)


def test_a_small_offset_is_a_warning_and_none_is_silent():
    table = hosts.Hosts(dict(TABLE.names), dict(TABLE.addrs), {0: (0.0, 0.001), 1: (-2.5, 0.001)})
    assert hosts.check_clocks(table) == ["clock: nodeB's clock is 2.5 s behind nodeA's (+/- 1 ms); torchrun tolerates up to 10 s; "
                                         "sync the clocks"]
    table.offsets[1] = (0.01, 0.001)
    assert hosts.check_clocks(table) == []
    one_host = hosts.Hosts({0: "vm", 1: "vm"}, {}, {0: (0.0, 0.0), 1: (99.0, 0.0)})
    assert hosts.check_clocks(one_host) == [], "ranks on one host share its clock"


def test_an_offset_within_its_uncertainty_of_the_margin_is_not_refused():
    table = hosts.Hosts(dict(TABLE.names), dict(TABLE.addrs), {0: (0.0, 0.5), 1: (10.4, 0.5)})
    assert hosts.check_clocks(table)  # a warning: 10.4 s could be 9.9 s


def test_the_socket_interface_is_left_alone_on_one_host():
    env = {"MASTER_ADDR": "10.0.0.1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    assert hosts.socket_interfaces("gloo", env) == [] and "GLOO_SOCKET_IFNAME" not in env


def test_an_nccl_exclusion_list_is_not_checked_against_names():
    hosts.check_socket_vars({"NCCL_SOCKET_IFNAME": "^lo,docker"})
    with pytest.raises(UsageError, match="NCCL_SOCKET_IFNAME='=nope0' is not valid"):
        hosts.check_socket_vars({"NCCL_SOCKET_IFNAME": "=nope0"})
