"""Slurm: an sbatch script. One srun task per node runs torchrun; the batch shell owns preemption.

Slurm sends ``USR1`` to the batch shell ``grace_s`` before the time limit (``--signal=B:USR1@grace``),
or when asked (``scancel --signal=USR1 --batch JOB``). The shell forwards it through srun (srun
passes USR1 on; a TERM would make it kill the step) to torchrun, which passes it to the ranks
(``--signals-to-handle``): they save at the next step boundary and exit 75. torchrun then exits 1
anyway, so the script reads the run's ``summary.json``; ``preempted`` means ``scontrol requeue``,
and the requeued job resumes from the checkpoint. Secrets are not in the script: sbatch exports the
submitting shell's environment to the job.
"""

from __future__ import annotations

import os
import re
import shlex

from rubin.errors import UsageError
from rubin.launch.job import SHARED_STORE_OFF, Job, Launched, check_run_dir, shell_join
from rubin.launch.partition import partition_limit
from rubin.launch.spec import slurm_time
from rubin.launch.submit import hand_over

NAME = "slurm"
EXTENSION = "sbatch"
CONTAINER = False
SECRETS_FROM_SHELL = True
SUBMIT = "sbatch"
INSTALL = "install Slurm's client commands (Debian/Ubuntu: apt-get install slurm-client) on a login node of the cluster"
SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"


def check(job: Job, cfg, env: dict) -> None:
    lc = job.launch
    cap, what = partition_limit(lc.partition, gpu=lc.accelerator == "gpu")
    if cap == 0 and lc.accelerator == "gpu":  # "gpus_per_node <= 0" would be no advice at all
        raise UsageError(f"launch.accelerator='gpu' is not valid here: {what} offers no GPUs (a CPU partition); "
                         "set launch.accelerator=cpu to run CPU ranks there, or launch.partition=<a GPU partition> "
                         "(sinfo -o '%P %G' lists each partition's GPUs)")
    if cap is not None and lc.gpus_per_node > cap:
        raise UsageError(f"launch.gpus_per_node={lc.gpus_per_node} is not valid: {what} offers {cap} per node; "
                         f"set launch.gpus_per_node <= {cap} or pick another partition")
    check_run_dir(job, env, container=CONTAINER)


def render(job: Job) -> str:
    lc = job.launch
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        f"# Written by `rubin launch slurm`: job {job.name!r}. Submit with: sbatch <this file>",
        "# (the run dir must exist first: Slurm writes the job's log there; rubin launch creates it)",
        f"#SBATCH --job-name={job.name}",
        f"#SBATCH --nodes={lc.nnodes.replace(':', '-')}",
        "#SBATCH --ntasks-per-node=1",
    ]
    if lc.accelerator == "gpu":
        lines.append(f"#SBATCH --gpus-per-node={lc.gpu_type + ':' if lc.gpu_type else ''}{job.nproc}")
        if lc.cpus_per_node:
            lines.append(f"#SBATCH --cpus-per-task={lc.cpus_per_node}")
    else:
        lines.append(f"#SBATCH --cpus-per-task={lc.cpus_per_node or job.nproc}")
    if lc.memory_gb:
        lines.append(f"#SBATCH --mem={int(lc.memory_gb * 1024)}M")
    if job.time_limit_s:
        lines.append(f"#SBATCH --time={slurm_time(job.time_limit_s)}")
    if lc.partition:
        lines.append(f"#SBATCH --partition={lc.partition}")
    if lc.account:
        lines.append(f"#SBATCH --account={lc.account}")
    if lc.spot:
        lines.append("# launch.spot: Slurm has no spot tier; preemption by the cluster's policy is handled as below")
    lines += [
        f"#SBATCH --signal=B:USR1@{job.grace_s}",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        f"#SBATCH --output={job.run_dir}/slurm-%j.out",
    ]
    if lc.workdir:
        lines.append(f"#SBATCH --chdir={lc.workdir}")
    lines += ["", "set -uo pipefail", f"RUN_DIR={q(job.run_dir)}"]
    for k, v in lc.env.items():
        lines.append(f"export {k}={q(v)}")
    if lc.secrets:
        lines.append(f"# secrets {', '.join(lc.secrets)}: exported by sbatch from the submitting shell, never written here")
    lines += lc.setup
    how = dict(endpoint="$HEAD:" + str(lc.rdzv_port), rdzv_id="$SLURM_JOB_ID", extra=(f"--signals-to-handle={SIGNALS}",))
    # Several nodes: rubin's agent around torchrun on each (node checks; a node that lost the rendezvous rejoins).
    torchrun = job.agent(**how) if lc.nodes > 1 else job.torchrun(**how)
    lines += [
        "",
        "# The rendezvous runs on the first node; every node's agent finds it there.",
        'HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)',
        "# torchrun waits this long for the ranks' emergency save before it kills them.",
        f"export TORCH_ELASTIC_SHUTDOWN_TIMEOUT={job.grace_s}",
        "# A replacement node's agent can rejoin only without torch's shared rendezvous store (docs/faults.md).",
        f"export {SHARED_STORE_OFF}",
        "START=$(date +%s)",
        f"srun --ntasks-per-node=1 --kill-on-bad-exit=0 {shell_join(torchrun)} &",
        "SRUN=$!",
        "# USR1 (time limit near, or scancel --signal=USR1 --batch) and TERM: ask the ranks to save and stop.",
        "trap 'echo \"rubin-launch: signal: asking the ranks to save and stop\"; kill -USR1 $SRUN' USR1 TERM",
        "while :; do wait $SRUN; rc=$?; kill -0 $SRUN 2>/dev/null || break; done",
        "wait $SRUN 2>/dev/null; rc=$?",
        "",
        "# torchrun exits 1 after forwarding a signal even when every rank exited 75: summary.json says what happened.",
        f'STATUS=$({q(lc.python)} -m rubin.launch.status "$RUN_DIR" --since "$START")',
        'echo "rubin-launch: torchrun exited $rc; this attempt of the run: $STATUS"',
        'case "$STATUS" in',
        "  completed) exit 0 ;;",
        "  preempted|retry)",
        f'    if [ "${{SLURM_RESTART_COUNT:-0}}" -lt {lc.max_restarts} ]; then',
        '      echo "rubin-launch: requeueing job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0})"',
        '      scontrol requeue "$SLURM_JOB_ID"',
        "      exit 0",
        "    fi",
        f'    echo "rubin-launch: stopped again after {lc.max_restarts} requeues; not requeueing"',
        "    exit 75 ;;",
        '  *) [ "$rc" -ne 0 ] && exit "$rc"; exit 1 ;;',
        "esac",
    ]
    return "\n".join(lines) + "\n"


def submit(job: Job, text: str, out: str | None, env: dict, say=print) -> Launched:
    os.makedirs(job.run_dir, exist_ok=True)  # sbatch --output needs the folder to exist
    return hand_over(job, text, out, env, extension=EXTENSION, argv=submit_argv, job_id=parse_job_id, follow=follow)


def submit_argv(path: str, job: Job) -> list[str]:
    return [SUBMIT, "--parsable", path]


def parse_job_id(stdout: str) -> str | None:
    m = re.match(r"\s*(\d+)", stdout)  # --parsable: "JOBID" or "JOBID;CLUSTER"
    return m.group(1) if m else None


def follow(job_id: str, job: Job) -> str:
    return f"squeue -j {job_id}; tail -f {job.run_dir}/slurm-{job_id}.out"

