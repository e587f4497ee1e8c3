"""Losing a node, for real: hosts killed, cut off and replaced in the emulated cluster, while the job that
`rubin launch local ... --set launch.rdzv_host=nodeA` prints runs on each (docs/faults.md, "Losing a node").

Every case ends on a committed checkpoint's step or later, never earlier; a replaced node ends on the
uninterrupted run's digest.
"""

from __future__ import annotations

import re

import pytest
from clusterkit import needs_cluster
from jobkit import Job, committed, events, node_command, resumed_from, steps_logged, summary, wait_for, write_config

pytestmark = [needs_cluster(), pytest.mark.slow]
STEPS, EVERY, PAUSE_AT = 60, 10, 35
PAUSE = {"RUBIN_FAULT": f"pause@step={PAUSE_AT},seconds=300"}  # holds the victim mid-run whatever the load


@pytest.fixture(scope="module")
def uninterrupted(module_cluster_of):
    c = module_cluster_of(2)
    config = write_config(c.shared / "train.yaml", steps=STEPS, every=EVERY)
    job = Job(c, node_command(config, c.shared / "run", 2), c.shared)
    try:
        job.start("nodeA")
        job.start("nodeB")
        assert [job.wait("nodeA", 240), job.wait("nodeB", 240)] == [0, 0], job.log("nodeA")[-3000:]
    finally:
        job.stop()
    return {**summary(c.shared / "run"), "losses": steps_logged(c.shared / "run")}


def paused(job: Job, host: str, tag: str = "") -> bool:
    return "rubin-fault: pause" in job.log(host, tag)


def start_job(c, nodes=2, *sets, steps=STEPS):
    config = write_config(c.shared / "train.yaml", steps=steps, every=EVERY)
    return Job(c, node_command(config, c.shared / "run", nodes, *sets), c.shared)


def one_line_naming(log: str, host: str) -> str:
    lines = [ln for ln in log.splitlines() if ln.startswith("rubin: ") and "lost" in ln]
    assert lines, log[-3000:]
    assert host in lines[0] and "internal error" not in log, lines[0]
    return lines[0]


@pytest.mark.timeout(400)
def test_a_crashed_host_whose_replacement_comes_back(cluster_of, uninterrupted):
    c = cluster_of(2)
    job = start_job(c)
    try:
        job.start("nodeA")
        job.start("nodeB", env=PAUSE)
        wait_for(lambda: paused(job, "nodeB"), 120, "nodeB to reach the pause")
        c.inject("nodeB", "crash")
        c.revive("nodeB")
        job.start("nodeB", tag="-replacement")  # a replacement node runs the same command, without the fault
        assert job.wait("nodeA", 240) == 0, job.log("nodeA")[-3000:]
        assert job.wait("nodeB", 60) == 0, job.log("nodeB", "-replacement")[-3000:]
    finally:
        job.stop()
    run = c.shared / "run"
    line = one_line_naming(job.log("nodeA"), "rank 1 on nodeB")
    assert f"step {PAUSE_AT}" in line and "exit 75" in line
    s = summary(run)
    assert s["status"] == "completed" and s["world_size"] == 2 and s["steps"] == STEPS
    assert s["param_digest"] == uninterrupted["param_digest"]
    assert resumed_from(job.log("nodeA")) == [30], "it resumes from the last committed checkpoint before the loss"


@pytest.mark.timeout(400)
def test_a_crashed_host_with_no_replacement_under_min_max(cluster_of, uninterrupted):
    c = cluster_of(2)
    job = start_job(c, "1:2", "--set", "launch.rdzv_last_call_s=2")
    try:
        job.start("nodeA")
        job.start("nodeB", env=PAUSE)
        wait_for(lambda: paused(job, "nodeB"), 120, "nodeB to reach the pause")
        c.inject("nodeB", "crash")
        assert job.wait("nodeA", 300) == 0, job.log("nodeA")[-3000:]
    finally:
        job.stop()
    run, log = c.shared / "run", job.log("nodeA")
    s = summary(run)
    assert s["status"] == "completed" and s["world_size"] == 1 and s["steps"] == STEPS
    resumed = [e for e in events(run, "resume")]
    assert resumed and resumed[-1]["step"] == 30, resumed
    assert "world size 2 -> 1" in log and "global batch 64 kept" in log, log[-3000:]
    # The same samples at each step and the same learning rate: the losses follow the uninterrupted run's.
    base, after = uninterrupted["losses"], steps_logged(run)
    assert sorted(after) == list(range(1, STEPS + 1))
    for step in range(31, STEPS + 1):
        assert abs(after[step] - base[step]) <= 1e-4 * max(1.0, abs(base[step])), (step, after[step], base[step])


@pytest.mark.timeout(400)
def test_the_rendezvous_host_dies_and_its_replacement_comes_back(cluster_of, uninterrupted):
    c = cluster_of(2)
    job = start_job(c)
    try:
        job.start("nodeA", env=PAUSE)
        job.start("nodeB")
        wait_for(lambda: paused(job, "nodeA"), 120, "nodeA to reach the pause")
        c.inject("nodeA", "crash")
        wait_for(lambda: "is gone" in job.log("nodeB"), 180, "nodeB's agent to notice the rendezvous is gone")
        c.revive("nodeA")
        job.start("nodeA", tag="-replacement")
        assert job.wait("nodeB", 240) == 0, job.log("nodeB")[-3000:]
        assert job.wait("nodeA", 60) == 0, job.log("nodeA", "-replacement")[-3000:]
    finally:
        job.stop()
    log = job.log("nodeB")
    one_line_naming(log, "rank 0 on nodeA")
    assert "answers again: this node rejoins the job" in log
    s = summary(c.shared / "run")
    assert s["status"] == "completed" and s["param_digest"] == uninterrupted["param_digest"]
    assert max(resumed_from(log + job.log("nodeA", "-replacement"))) == 30


@pytest.mark.timeout(400)
def test_a_silent_partition_is_named_within_the_hang_timeout_and_loses_nothing(cluster_of):
    c = cluster_of(2)
    job = start_job(c, 2, "--set", "launch.hang_timeout_s=6")
    try:
        job.start("nodeA")
        job.start("nodeB")
        wait_for(lambda: len(committed(c.shared / "run")) >= 2 and max(steps_logged(c.shared / "run"), default=0) >= 25,
                 180, "two committed checkpoints")
        c.inject("nodeB", "partition")
        line = wait_for(lambda: re.search(r"rubin: error: hang: .*", job.log("nodeA")), 60,
                        "nodeA's watchdog").group(0)
        assert "rank 1 on nodeB" in line and "does not answer" in line and "exit 75" in line, line
        c.heal("nodeB")
        assert job.wait("nodeA", 300) == 0, job.log("nodeA")[-3000:]
        assert job.wait("nodeB", 120) == 0, job.log("nodeB")[-3000:]
    finally:
        job.stop()
    run = c.shared / "run"
    s = summary(run)
    assert s["status"] == "completed" and s["steps"] == STEPS
    hangs = events(run, "hang")
    assert hangs and hangs[0]["stuck_s"] < 6 + 10  # the hang timeout, not the process group's 60 s
