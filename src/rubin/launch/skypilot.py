"""SkyPilot: a task YAML for ``sky jobs launch`` (a managed job: re-provisioned after a preemption).

Every node runs torchrun with the c10d rendezvous on the first node's IP (the first line of
``SKYPILOT_NODE_IPS``). ``resources.job_recovery`` recovers from preemptions
(``EAGER_NEXT_REGION``) and from user-code failures up to ``max_restarts_on_errors``; a rubin
preemption (exit 75) is listed in ``recover_on_exit_codes``. The run dir must be on a bucket or
volume mount (``file_mounts``), because a recovered job gets fresh machines. Secrets are
``secrets:`` entries with null values, filled at submission from the submitting shell (``--secret``).
"""

from __future__ import annotations

from rubin.errors import UsageError
from rubin.launch import node
from rubin.launch.job import Job, Launched, check_run_dir, refuse_elastic
from rubin.launch.submit import hand_over
from rubin.launch.yamltext import dump, literal

NAME = "skypilot"
EXTENSION = "yaml"
CONTAINER = True
SECRETS_FROM_SHELL = True
SUBMIT = "sky"
INSTALL = "install SkyPilot (pip install 'skypilot[aws]', or the extra for your cloud) and run sky check"
BUCKETS = ("s3://", "gs://", "r2://", "az://", "https://", "cos://", "oci://")


def check(job: Job, cfg, env: dict) -> None:
    refuse_elastic(job)
    check_run_dir(job, env, container=CONTAINER)


def render(job: Job) -> str:
    lc = job.launch
    torchrun = job.torchrun(endpoint=f"$HEAD:{lc.rdzv_port}", rdzv_id="$SKYPILOT_TASK_ID", nnodes="$SKYPILOT_NUM_NODES")
    run = node.script(job, torchrun, pre_lines=['HEAD=$(echo "$SKYPILOT_NODE_IPS" | head -n1)'],
                      with_setup=False)  # setup: runs once per provisioned cluster
    resources: dict = {}
    if lc.infra:
        resources["infra"] = lc.infra
    if lc.accelerator == "gpu":
        resources["accelerators"] = f"{lc.gpu_type}:{job.nproc}" if lc.gpu_type else None
        if not lc.gpu_type and not lc.instance_type:
            raise UsageError("launch.gpu_type is missing: SkyPilot picks machines by accelerator; "
                             "set launch.gpu_type (e.g. H100) or launch.instance_type")
        if resources["accelerators"] is None:
            del resources["accelerators"]
    if lc.instance_type:
        resources["instance_type"] = lc.instance_type
    if lc.cpus_per_node:
        resources["cpus"] = f"{lc.cpus_per_node}+"
    if lc.memory_gb:
        resources["memory"] = f"{lc.memory_gb:g}+"
    if lc.image:
        resources["image_id"] = lc.image if lc.image.startswith("docker:") else f"docker:{lc.image}"
    resources["use_spot"] = lc.spot
    resources["job_recovery"] = {
        "strategy": "EAGER_NEXT_REGION",
        "max_restarts_on_errors": lc.max_restarts,
        "recover_on_exit_codes": [75],
    }
    doc: dict = {"name": job.name, "num_nodes": lc.nodes, "resources": resources}
    if lc.workdir:
        doc["workdir"] = lc.workdir
    mounts = {}
    for i, m in enumerate(lc.mounts):
        if not m.source.startswith(BUCKETS):
            raise UsageError(f"launch.mounts[{i}].source={m.source!r} is not valid for skypilot: allowed is a bucket URL "
                             f"({', '.join(BUCKETS)}); put the data or run dir in a bucket")
        mounts[m.path] = {"source": m.source, "mode": "MOUNT" if m.read_only else "MOUNT_CACHED"}
    if mounts:
        doc["file_mounts"] = mounts
    if lc.env:
        doc["envs"] = dict(lc.env)
    if lc.secrets:
        doc["secrets"] = {name: None for name in lc.secrets}
    if lc.setup:
        doc["setup"] = literal("\n".join(lc.setup) + "\n")
    doc["run"] = literal(run)
    return dump(doc, f"# Written by `rubin launch skypilot`: job {job.name!r}. Submit with: sky jobs launch <this file>")


def submit(job: Job, text: str, out: str | None, env: dict, say=print) -> Launched:
    return hand_over(job, text, out, env, extension=EXTENSION, argv=submit_argv, job_id=parse_job_id, follow=follow)


def submit_argv(path: str, job: Job) -> list[str]:
    argv = [SUBMIT, "jobs", "launch", "--yes", "--detach-run", "-n", job.name]
    for name in job.launch.secrets:
        argv += ["--secret", name]  # the value comes from this process's environment, not the command line
    return argv + [path]


def parse_job_id(stdout: str) -> str | None:
    import re

    m = re.search(r"[Jj]ob (?:ID|id)[:\s]+(\d+)", stdout) or re.search(r"ID:\s*(\d+)", stdout)
    return m.group(1) if m else None


def follow(job_id: str, job: Job) -> str:
    return f"sky jobs queue; sky jobs logs {job_id}"
