"""Azure ML: a command job (CLI v2 YAML). Azure ML starts one process per node; that process is torchrun.

``distribution: {type: pytorch, process_count_per_instance: 1}`` makes Azure ML set ``MASTER_ADDR``
(the first node) on every node; torchrun's c10d rendezvous runs there and spawns ``gpus_per_node``
ranks per node. Spot: ``queue_settings.job_tier: spot`` (or a cluster created with
``tier: low_priority``); torchrun's ``--max-restarts`` re-forms the job when a node comes back.
Secrets: each is read at job start from Azure Key Vault with the job's managed identity
(``python -m rubin.launch.keyvault``), so no value is in the YAML.
"""

from __future__ import annotations

import shlex

from rubin.errors import UsageError
from rubin.launch import node
from rubin.launch.job import Job, Launched, check_run_dir, refuse_elastic, require_image
from rubin.launch.submit import hand_over
from rubin.launch.yamltext import dump, literal

NAME = "azureml"
EXTENSION = "yaml"
CONTAINER = True
SECRETS_FROM_SHELL = False
SUBMIT = "az"
INSTALL = "install the Azure CLI (https://learn.microsoft.com/cli/azure/install-azure-cli) and its ml extension (az extension add -n ml)"
SCHEMA = "https://azuremlschemas.azureedge.net/latest/commandJob.schema.json"


def check(job: Job, cfg, env: dict) -> None:
    refuse_elastic(job)
    lc = job.launch
    require_image(job)
    if not lc.compute:
        raise UsageError("launch.compute is missing: an Azure ML job runs on a compute cluster; set launch.compute=<cluster name>")
    for name, ref in lc.secrets.items():
        if not (ref and ref.key_vault):
            raise UsageError(f"launch.secrets.{name} has no key_vault reference: Azure ML jobs read secrets from a Key Vault; "
                             f"set launch.secrets.{name}.key_vault=VAULT/SECRET")
    check_run_dir(job, env, container=CONTAINER)


def render(job: Job) -> str:
    lc = job.launch
    torchrun = job.torchrun(endpoint=f"$MASTER_ADDR:{lc.rdzv_port}", rdzv_id="$AZUREML_RUN_ID")
    pre_lines = [
        f"export {name}=\"$({shlex.quote(lc.python)} -m rubin.launch.keyvault {shlex.quote(ref.key_vault)})\""
        for name, ref in lc.secrets.items()
    ]
    env = lc.image if lc.image.startswith("azureml:") else {"image": lc.image}
    resources = {"instance_count": lc.nodes, "shm_size": "16g"}
    if lc.instance_type:
        resources["instance_type"] = lc.instance_type
    doc = {
        "$schema": SCHEMA,
        "type": "command",
        "display_name": job.name,
        "experiment_name": job.name,
        "code": lc.workdir or ".",
        "command": None,  # filled in below, once the mounts are known
        "environment": env,
        "compute": lc.compute if lc.compute.startswith("azureml:") else f"azureml:{lc.compute}",
        "distribution": {"type": "pytorch", "process_count_per_instance": 1},
        "resources": resources,
    }
    if lc.env:
        doc["environment_variables"] = dict(lc.env)
    if job.time_limit_s:
        doc["limits"] = {"timeout": job.time_limit_s}
    if lc.spot:
        doc["queue_settings"] = {"job_tier": "spot"}
    if lc.secrets:
        doc["identity"] = {"type": "managed"}
    outputs, inputs = {}, {}
    for i, m in enumerate(lc.mounts):  # Azure ML picks the mount point; a link puts it where the config expects it
        if not m.source.startswith("azureml:"):
            raise UsageError(f"launch.mounts[{i}].source={m.source!r} is not valid for azureml: allowed is an Azure ML URI, "
                             "azureml://datastores/NAME/paths/PATH; register the storage as a datastore and use its URI")
        entry = {"type": "uri_folder", "path": m.source, "mode": "ro_mount" if m.read_only else "rw_mount"}
        kind = "inputs" if m.read_only else "outputs"
        (inputs if m.read_only else outputs)[f"mount_{i}"] = entry
        parent = m.path.rsplit("/", 1)[0]
        link = f"ln -sfn ${{{{{kind}.mount_{i}}}}} {shlex.quote(m.path)}"
        pre_lines.append(f"mkdir -p {shlex.quote(parent)} && {link}" if parent else link)
    doc["command"] = literal(node.script(job, torchrun, pre_lines=pre_lines))
    if inputs:
        doc["inputs"] = inputs
    if outputs:
        doc["outputs"] = outputs
    return dump(doc, f"# Written by `rubin launch azureml`: job {job.name!r}. Submit with: az ml job create -f <this file>")


def submit(job: Job, text: str, out: str | None, env: dict, say=print) -> Launched:
    return hand_over(job, text, out, env, extension=EXTENSION, argv=submit_argv, job_id=parse_job_id, follow=follow)


def submit_argv(path: str, job: Job) -> list[str]:
    return [SUBMIT, "ml", "job", "create", "-f", path, "--query", "name", "-o", "tsv"]


def parse_job_id(stdout: str) -> str | None:
    return stdout.strip().splitlines()[-1].strip() if stdout.strip() else None


def follow(job_id: str, job: Job) -> str:
    return f"az ml job stream -n {job_id}"
