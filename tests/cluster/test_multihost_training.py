"""Training across hosts: DDP and FSDP2 on 2 and 3 emulated hosts, one gloo rank each, through torchrun's
c10d rendezvous, compared with the same job on one host.

What is bit-identical and what agrees within a tolerance:
- N ranks on N hosts against N ranks on one host: bit-identical (the same param_digest). Each rank reads
  the same samples, and gloo's all-reduce adds the same numbers in the same order whichever host a rank is on.
- N ranks against one process with the same global batch: within a tolerance. The single process sums the
  whole batch in one reduction; the ranks sum halves and then add them, which rounds differently in fp32.
"""

from __future__ import annotations

import subprocess

import pytest
from clusterkit import needs_cluster
from jobkit import Job, node_command, steps_logged, summary, write_config
from utils import invoke, torchrun_cmd

pytestmark = [needs_cluster(), pytest.mark.slow]
STEPS = 30


def run_on_hosts(c, config, run_dir, nodes: int) -> dict:
    job = Job(c, node_command(config, run_dir, nodes), c.shared)
    try:
        for h in c.hosts[:nodes]:
            job.start(h.name)
        codes = [job.wait(h.name, 240) for h in c.hosts[:nodes]]
    finally:
        job.stop()
    assert codes == [0] * nodes, "\n".join(job.log(h.name)[-2000:] for h in c.hosts[:nodes])
    assert "internal error" not in job.log("nodeA")
    return summary(run_dir)


def run_one_host(tmp_path, config, run_dir, nproc: int) -> dict:
    cmd = torchrun_cmd(nproc, ["train", config, "--set", f"run.dir={run_dir}", "--quiet"])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-3000:]
    return summary(run_dir)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("strategy, hosts, batch", [("ddp", 2, 64), ("fsdp", 2, 64), ("ddp", 3, 48)])
def test_hosts_train_like_one_host(cluster_of, tmp_path, strategy, hosts, batch):
    c = cluster_of(hosts)
    config = write_config(c.shared / "train.yaml", steps=STEPS, every=10, distributed={"strategy": strategy},
                          data={"batch_size": batch})
    across = run_on_hosts(c, config, c.shared / "run", hosts)
    assert across["status"] == "completed" and across["world_size"] == hosts and across["steps"] == STEPS

    one_host = run_one_host(tmp_path, config, tmp_path / "one-host", hosts)
    assert across["param_digest"] == one_host["param_digest"], "N ranks are N ranks, on one host or N"

    single = tmp_path / "single"
    r = invoke(["train", config, "--set", f"run.dir={single}", "--set", "distributed.strategy=auto", "--quiet"])
    assert r.exit_code == 0, r.stderr
    a, b = steps_logged(c.shared / "run"), steps_logged(single)
    assert sorted(a) == sorted(b) == list(range(1, STEPS + 1))
    for step in a:
        assert abs(a[step] - b[step]) <= 1e-4 * max(1.0, abs(b[step])), (step, a[step], b[step])

