"""The node agent's checks and fixes before torchrun starts (launch/agent.py), and the run's account of an
attempt it exits by. The same paths on real hosts: tests/cluster/test_launch_traps.py, test_node_loss.py."""

from __future__ import annotations

import json
import socket
import time

import pytest

from rubin.errors import UsageError
from rubin.launch import agent
from rubin.launch.status import attempt_status
from rubin.platform import network

TRAIN = ["-m", "rubin", "train", "cfg.yaml"]


def args(endpoint: str, *extra: str, nnodes: str = "2") -> list[str]:
    return [f"--nnodes={nnodes}", "--nproc-per-node=1", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", *extra, *TRAIN]


def test_node_rank_with_c10d_is_refused(tmp_path):
    with pytest.raises(UsageError, match=r"--node-rank=1 is not valid with --rdzv-backend=c10d on .*: c10d gives each node its rank"):
        agent.prepare(args("localhost:29400", "--node-rank", "1"), str(tmp_path), same_machine=True, env={})


def test_a_loopback_endpoint_for_nodes_on_other_machines_is_refused(tmp_path):
    with pytest.raises(UsageError, match=r"rendezvous host '127.0.0.1' is 127.0.0.1 \(loopback\) .* with 2 nodes: each machine"):
        agent.prepare(args("127.0.0.1:29400"), str(tmp_path), same_machine=False, env={})
    # the same endpoint is right when every node runs here, and for one node anywhere
    agent.prepare(args("127.0.0.1:29400"), str(tmp_path), same_machine=True, env={})
    agent.prepare(args("127.0.0.1:29400", nnodes="1"), str(tmp_path), same_machine=False, env={})


def test_an_endpoint_that_does_not_resolve_is_one_line_naming_this_host(tmp_path):
    with pytest.raises(UsageError, match=rf"rendezvous host 'no-such-host.invalid' does not resolve on {socket.gethostname()}"):
        agent.prepare(args("no-such-host.invalid:29400"), str(tmp_path), same_machine=False, env={})


def test_an_address_endpoint_gets_is_host_from_this_nodes_addresses(tmp_path):
    mine = next(iter(network.own_addresses() - {"127.0.0.1"}), None)
    if mine is None:
        pytest.skip("this machine has no address but loopback")
    env: dict = {}
    out, said = agent.prepare(args(f"{mine}:29400", "--rdzv-conf=join_timeout=30"), str(tmp_path), same_machine=False, env=env)
    assert "--rdzv-conf=join_timeout=30,is_host=1" in out
    assert any("set is_host=1 here" in line for line in said)
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    # an address that is not this node's: it joins, it does not host
    out, _ = agent.prepare(args("10.255.255.1:29400"), str(tmp_path), same_machine=False, env={})
    assert "is_host=0" in out[out.index("--rdzv-conf") + 1]


def test_a_socket_interface_that_does_not_exist_is_refused_before_torchrun(tmp_path):
    with pytest.raises(UsageError, match=r"GLOO_SOCKET_IFNAME='nope0' is not valid on .*: it has no interface 'nope0'; allowed are"):
        agent.prepare(args("127.0.0.1:29400"), str(tmp_path), same_machine=True, env={"GLOO_SOCKET_IFNAME": "nope0"})


@pytest.mark.parametrize("summary, status", [
    ({"status": "completed"}, "completed"),
    ({"status": "preempted"}, "preempted"),
    ({"status": "failed", "exit_reason": "lost_peer", "retry": True}, "retry"),
    ({"status": "failed", "exit_reason": "error"}, "failed"),
])
def test_status_tells_a_lost_peer_from_a_failure(tmp_path, summary, status):
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    assert attempt_status(tmp_path, time.time() - 5) == status


def test_the_agent_exits_2_with_one_line_on_bad_input(tmp_path, capsys):
    code = agent.main(["--run-dir", str(tmp_path), "--", *args("127.0.0.1:29400", "--node-rank=1")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("rubin: error: --node-rank=1 is not valid"), err
