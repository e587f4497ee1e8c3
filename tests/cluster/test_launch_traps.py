"""The traps of a first multi-host launch, each on real emulated hosts: fixed and said so, or one line
that names the host before the job spends any time (docs/faults.md, "Traps a multi-host launch avoids")."""

from __future__ import annotations

import pytest
from clusterkit import needs_cluster
from jobkit import Job, node_command, steps_logged, summary, wait_for, write_config

pytestmark = [needs_cluster(), pytest.mark.slow]
STEPS = 12


def two_host_job(c, *sets, env_b=None, env_a=None, wait=True):
    config = write_config(c.shared / "train.yaml", steps=STEPS, every=6)
    job = Job(c, node_command(config, c.shared / "run", 2, *sets), c.shared)
    job.start("nodeA", env=env_a)
    job.start("nodeB", env=env_b)
    if wait:
        try:
            codes = [job.wait("nodeA", 240), job.wait("nodeB", 240)]
        finally:
            job.stop()
        return job, codes
    return job, None


@pytest.mark.timeout(300)
def test_an_endpoint_given_as_an_address_gets_is_host_and_trains(cluster_of):
    c = cluster_of(2)
    job, codes = two_host_job(c, "--set", f"launch.rdzv_host={c.host('nodeA').addr}")
    assert codes == [0, 0], job.log("nodeA")[-3000:] + job.log("nodeB")[-3000:]
    assert "set is_host=1 here" in job.log("nodeA") and "set is_host=0 here" in job.log("nodeB")
    assert summary(c.shared / "run")["status"] == "completed"


@pytest.mark.timeout(300)
def test_a_hostname_on_loopback_gets_the_routed_interface_and_trains(cluster_of):
    c = cluster_of(2)
    for h in ("nodeA", "nodeB"):
        c.inject(h, "hosts-entry", f"127.0.1.1 {h}")  # Debian's default line for a machine's own name
    job, codes = two_host_job(c)
    assert codes == [0, 0], job.log("nodeA")[-3000:] + job.log("nodeB")[-3000:]
    for h in ("nodeA", "nodeB"):
        assert f"warning: GLOO_SOCKET_IFNAME was not set: using eth0 ({c.host(h).addr})" in job.log(h), job.log(h)[-3000:]
        assert f"({h} resolves to 127.0.1.1, which Gloo would bind to)" in job.log(h)
    assert summary(c.shared / "run")["world_size"] == 2


def refused_on(job, host: str) -> str:
    log = job.log(host)
    lines = [ln for ln in log.splitlines() if ln.startswith("rubin: error: ")]
    assert lines, log[-3000:]
    assert host in lines[0] and "Traceback" not in log, log[-3000:]
    return lines[0]


@pytest.mark.timeout(300)
def test_a_socket_interface_that_does_not_exist_is_one_line(cluster_of):
    c = cluster_of(2)
    job, codes = two_host_job(c, env_b={"GLOO_SOCKET_IFNAME": "ib0"}, wait=False)
    try:
        assert job.wait("nodeB", 60) == 2
        line = refused_on(job, "nodeB")
        assert "GLOO_SOCKET_IFNAME='ib0' is not valid on nodeB: it has no interface 'ib0'" in line and "eth0" in line
    finally:
        job.stop()
    assert not steps_logged(c.shared / "run")


@pytest.mark.timeout(300)
def test_a_rendezvous_host_that_does_not_resolve_on_one_host(cluster_of):
    c = cluster_of(2)
    c.inject("nodeB", "hosts-entry", "- nodeA")
    job, _ = two_host_job(c, wait=False)
    try:
        assert job.wait("nodeB", 60) == 2
        assert "rendezvous host 'nodeA' does not resolve on nodeB" in refused_on(job, "nodeB")
    finally:
        job.stop()


@pytest.mark.timeout(300)
def test_a_run_dir_one_host_cannot_write(cluster_of):
    c = cluster_of(2)
    c.inject("nodeB", "readonly", str(c.shared))
    job, _ = two_host_job(c, wait=False)
    try:
        assert job.wait("nodeB", 60) == 2
        assert "is not writable on nodeB (Read-only file system)" in refused_on(job, "nodeB")
    finally:
        job.stop()


@pytest.mark.timeout(300)
def test_a_clock_off_beyond_the_heartbeat_margin_is_refused_before_the_first_step(cluster_of):
    c = cluster_of(2)
    c.inject("nodeB", "clock", "+40s")
    job, _ = two_host_job(c, "--set", "launch.max_restarts=0", wait=False)
    try:
        line = wait_for(lambda: next((ln for ln in job.log("nodeA").splitlines() if ln.startswith("rubin: error: clock")), None),
                        120, "rank 0's clock line")
        assert "nodeB's clock is 40." in line and "ahead of nodeA's" in line, line
        assert job.wait("nodeA", 120) != 0
    finally:
        job.stop()
    assert not steps_logged(c.shared / "run"), "no step ran"
