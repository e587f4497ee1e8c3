"""The generated sbatch script's own logic, run by bash with stand-ins for srun and scontrol, so it is
tested where no Slurm runs: USR1 reaches the ranks, they save, and the script requeues because
summary.json says preempted (torchrun itself exits 1); a job out of requeues exits 75 instead."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from launchhelp import free_port, write_config
from utils import invoke

pytestmark = pytest.mark.slow

SRUN = """#!/bin/bash
# stand-in for srun: drop srun's own options, run the command (one task on this node)
while [[ "$1" == --* ]]; do shift; done
exec "$@"
"""
SCONTROL = """#!/bin/bash
# stand-in for scontrol: one host; record requeues
if [ "$1 $2" = "show hostnames" ]; then echo 127.0.0.1; exit 0; fi
echo "$*" >> "$SCONTROL_LOG"
"""


def _fake_bin(tmp_path):
    b = tmp_path / "bin"
    b.mkdir()
    for name, text in (("srun", SRUN), ("scontrol", SCONTROL)):
        (b / name).write_text(text)
        (b / name).chmod(0o755)
    return b


@pytest.mark.timeout(300)
@pytest.mark.parametrize("restarts_so_far,requeued,code", [(0, True, 0), (3, False, 75)])
def test_usr1_saves_and_requeues_from_the_summary(tmp_path, restarts_so_far, requeued, code):
    run_dir = tmp_path / "run"
    cfg = write_config(tmp_path / "train.yaml", run_dir, steps=40)
    script = tmp_path / "job.sbatch"
    r = invoke(["launch", "slurm", cfg, "--dry-run", "--out", script, "--gpus-per-node", "2",
                "--set", f"launch.rdzv_port={free_port()}", "--set", "launch.max_restarts=3"])
    assert r.exit_code == 0, r.stderr
    run_dir.mkdir()
    log = tmp_path / "scontrol.log"
    env = dict(os.environ, PATH=f"{_fake_bin(tmp_path)}{os.pathsep}{os.environ['PATH']}", SCONTROL_LOG=str(log),
               SLURM_JOB_ID="42", SLURM_JOB_NODELIST="localhost", SLURM_RESTART_COUNT=str(restarts_so_far),
               OMP_NUM_THREADS="1", RUBIN_FAULT="pause@step=10,seconds=6")
    proc = subprocess.Popen(["bash", str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 200
        metrics = run_dir / "metrics.jsonl"
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 9):
            assert proc.poll() is None and time.monotonic() < deadline, "the job never reached step 9"
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGUSR1)  # what --signal=B:USR1@grace does: the batch shell only
        out, _ = proc.communicate(timeout=200)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "preempted" and 9 <= summary["steps"] < 40, out[-3000:]
    assert "torchrun exited 1; this attempt of the run: preempted" in out  # torchrun's code is not the verdict
    assert proc.returncode == code, out[-3000:]
    assert (log.exists() and "requeue 42" in log.read_text()) is requeued
