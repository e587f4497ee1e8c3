"""The ``launch:`` section: where and how a training config runs, typed and strict.

It lives inside a train config (which holds it as an opaque mapping; ``launch_section`` validates it
for ``rubin launch`` and ``rubin train``) or in its own file
given with ``rubin launch --launch FILE``. Secrets are references only: the job file names where a
value comes from (the submitting shell, a Kubernetes Secret, an Azure Key Vault), never the value.
"""

from __future__ import annotations

import re
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rubin.errors import validation_error

# Variable names that hold credentials, and values shaped like well-known credentials.
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|(^|_)KEY$|(^|_)SAS($|_)|AUTH", re.I)
SECRET_VALUE = re.compile(
    r"hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}"
    r"|xox[abpr]-[A-Za-z0-9-]{10,}|[?&]sig=[^&\s]+|AccountKey=|-----BEGIN [A-Z ]*PRIVATE KEY"
)
_K8S_NAME = r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?"
_K8S_REF = re.compile(rf"^{_K8S_NAME}/[-._a-zA-Z0-9]+$")
_VAULT_REF = re.compile(r"^[a-zA-Z][-a-zA-Z0-9]{2,23}/[-a-zA-Z0-9]{1,127}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DURATION = re.compile(r"^(?:(\d+)-)?(\d+):(\d{1,2})(?::(\d{1,2}))?$|^(\d+(?:\.\d+)?)\s*([smhd])$")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class SecretRef(_Section):
    """Where one secret comes from on each target. Slurm, local and SkyPilot take it from the submitting shell."""

    k8s: Optional[str] = Field(None, description="Kubernetes Secret as NAME/KEY (env valueFrom.secretKeyRef)")
    key_vault: Optional[str] = Field(None, description="Azure Key Vault secret as VAULT/SECRET, read at job start with the "
                                                       "compute's managed identity")

    @field_validator("k8s")
    @classmethod
    def _k8s_ref(cls, v):
        if v is not None and not _K8S_REF.match(v):
            raise ValueError(f"launch.secrets.*.k8s={_show(v)} is not a Kubernetes secret reference: allowed is NAME/KEY, "
                             "e.g. hf-token/token; create the Secret with kubectl and name it here")
        return v

    @field_validator("key_vault")
    @classmethod
    def _vault_ref(cls, v):
        if v is not None and not _VAULT_REF.match(v):
            raise ValueError(f"launch.secrets.*.key_vault={_show(v)} is not a Key Vault reference: allowed is VAULT/SECRET, "
                             "e.g. my-vault/hf-token; store the value in the vault and name it here")
        return v


class Mount(_Section):
    source: str = Field(description="what to mount: pvc:NAME (k8s), a bucket URL s3://, gs://, r2://, az:// (SkyPilot), "
                                    "azureml://datastores/... (Azure ML); Slurm and local see shared filesystems directly")
    path: str = Field(description="absolute path inside the job")
    read_only: bool = Field(True, description="data mounts are read-only; the run dir's mount must be writable")

    @field_validator("path")
    @classmethod
    def _absolute(cls, v):
        if not v.startswith("/"):
            raise ValueError(f"launch.mounts[].path={v!r} is not valid: a mount path must be absolute, e.g. /data")
        return v.rstrip("/") or "/"


class LaunchConfig(_Section):
    name: Optional[str] = Field(None, description="job name (default: run.name)")
    nodes: int = Field(1, description="machines; every node runs one torchrun agent. MIN:MAX (e.g. 2:4, local and slurm): "
                                      "an elastic job that goes on with fewer nodes after a loss, down to MIN")
    min_nodes: Optional[int] = Field(None, description="set from nodes: MIN:MAX (default: nodes)")
    gpus_per_node: int = Field(1, ge=1, description="ranks per node: one per GPU (or CPU processes with accelerator=cpu)")
    accelerator: Literal["gpu", "cpu"] = Field("gpu", description="gpu: request GPUs; cpu: ranks are CPU processes (tests, smoke runs)")
    gpu_type: Optional[str] = Field(None, description="GPU model to request, e.g. H100 (Slurm gres type, SkyPilot accelerator, "
                                                      "k8s node label)")
    instance_type: Optional[str] = Field(None, description="cloud instance type (Azure ML resources.instance_type, SkyPilot instance_type)")
    cpus_per_node: Optional[int] = Field(None, ge=1, description="CPU cores per node to request")
    memory_gb: Optional[float] = Field(None, gt=0, description="memory per node to request, GB")
    image: Optional[str] = Field(None, description="container image with rubin installed (k8s, Azure ML, SkyPilot)")
    setup: list[str] = Field(default_factory=list, description="shell lines run on every node before training, e.g. module "
                                                               "load, source venv")
    python: str = Field("python", description="the interpreter inside the job (one that has rubin and torch)")
    workdir: Optional[str] = Field(None, description="directory the job runs in (Slurm --chdir, container workingDir, SkyPilot "
                                                     "workdir, Azure ML code)")
    partition: Optional[str] = Field(None, description="Slurm partition")
    account: Optional[str] = Field(None, description="Slurm account")
    namespace: str = Field("default", description="Kubernetes namespace")
    queue: Optional[str] = Field(None, description="Kubernetes Kueue queue (kueue.x-k8s.io/queue-name label)")
    compute: Optional[str] = Field(None, description="Azure ML compute target (cluster name)")
    infra: Optional[str] = Field(None, description="SkyPilot infra, e.g. aws, aws/us-east-1, k8s")
    time_limit: Optional[str] = Field(None, description="wall-clock limit: HH:MM:SS, D-HH:MM:SS, or 90m / 2h / 1d")
    spot: bool = Field(False, description="spot / low-priority capacity: cheaper, preemptible")
    max_restarts: int = Field(3, ge=0, description="torchrun restarts after a rank fails, and scheduler requeues after a preemption")
    grace_s: Optional[int] = Field(None, gt=0, description="seconds the target gives between its signal and the kill "
                                                             "(default: checkpoint.preemption_grace_s + 30)")
    rdzv_port: int = Field(29400, ge=1, le=65535, description="port of the c10d rendezvous on the first node")
    rdzv_host: Optional[str] = Field(None, description="local target: host of the rendezvous (default 127.0.0.1: every agent on "
                                                       "this machine)")
    rdzv_join_timeout_s: Optional[int] = Field(None, gt=0, description="how long a rendezvous round waits for the nodes to join "
                                                                       "(torch's default: 600)")
    rdzv_last_call_s: Optional[int] = Field(None, gt=0, description="with nodes MIN:MAX, how long a round that has MIN nodes waits "
                                                                    "for more (torch's default: 30)")
    rejoin_timeout_s: int = Field(600, gt=0, description="multi-host: how long a node whose rendezvous host went away waits for it "
                                                         "to come back, then rejoins the re-formed job")
    hang_timeout_s: float = Field(300, gt=0, description="multi-host: faults.hang_timeout_s when the config sets none, so a silent "
                                                         "partition ends in this time, not the process group's timeout")
    run_dir: Optional[str] = Field(None, description="the run dir inside the job, on storage every node and restart sees "
                                                     "(default: run.dir)")
    mounts: list[Mount] = Field(default_factory=list, description="data and run-dir mounts")
    env: dict[str, str] = Field(default_factory=dict, description="plain environment variables (never secrets: they are written "
                                                                  "into the job file)")
    secrets: dict[str, Optional[SecretRef]] = Field(default_factory=dict, description="secret env vars by reference: NAME: "
                                                                                      "{k8s: SECRET/KEY, key_vault: VAULT/NAME}")

    @field_validator("time_limit")
    @classmethod
    def _time_limit(cls, v):
        if v is not None:
            parse_duration(v)
        return v

    @field_validator("env")
    @classmethod
    def _plain_env(cls, env):
        for k, v in env.items():
            if not _ENV_NAME.match(k):
                raise ValueError(f"launch.env.{k} is not a valid variable name: allowed are letters, digits and _, not first a digit")
            if SECRET_NAME.search(k) or SECRET_VALUE.search(str(v)):
                raise ValueError(f"launch.env.{k} looks like a secret, and env values are written into the job file: "
                                 f"pass it by reference instead, under launch.secrets.{k} (see docs/launch.md)")
        return env

    @field_validator("secrets")
    @classmethod
    def _secret_names(cls, secrets):
        for k in secrets:
            if not _ENV_NAME.match(k):
                raise ValueError(f"launch.secrets.{k} is not a valid variable name: allowed are letters, digits and _")
        return secrets

    @field_validator("setup")
    @classmethod
    def _no_inline_setup_secret(cls, lines):
        for i, line in enumerate(lines):
            if SECRET_VALUE.search(line):
                raise ValueError(f"launch.setup[{i}] holds what looks like a credential, and setup lines are written into the job file: "
                                 "put the value in the environment and list its name under secrets")
        return lines

    @field_validator("mounts")
    @classmethod
    def _no_sas_url(cls, mounts):
        for i, m in enumerate(mounts):
            if SECRET_VALUE.search(m.source):
                raise ValueError(f"launch.mounts[{i}].source holds a credential (a SAS signature or key): mount by a datastore or "
                                 "bucket name and let the platform's identity authorize it")
        return mounts

    @model_validator(mode="before")
    @classmethod
    def _node_range(cls, data):
        nodes = data.get("nodes") if isinstance(data, dict) else None
        if isinstance(nodes, str) and ":" in nodes:
            lo, _, hi = nodes.partition(":")
            if not (lo.strip().isdigit() and hi.strip().isdigit()):
                raise ValueError(f"launch.nodes={nodes!r} is not valid: allowed are a count (2) or MIN:MAX (2:4)")
            if int(lo) > int(hi):
                raise ValueError(f"launch.nodes={nodes!r} is not valid: MIN {int(lo)} is above MAX {int(hi)}; write MIN:MAX, e.g. "
                                 f"{hi.strip()}:{lo.strip()}")
            data = {**data, "nodes": int(hi), "min_nodes": int(lo)}
        return data

    @field_validator("nodes", "min_nodes")
    @classmethod
    def _at_least_one(cls, v):
        if v is not None and v < 1:
            raise ValueError(f"launch.nodes={v} is not valid: a job needs at least 1 node; set launch.nodes=1 or more (MIN:MAX "
                             "for an elastic job)")
        return v

    @property
    def nnodes(self) -> str:
        """torchrun's --nnodes: N, or MIN:MAX."""
        lo = self.min_nodes or self.nodes
        return str(self.nodes) if lo == self.nodes else f"{lo}:{self.nodes}"

    @property
    def elastic(self) -> bool:
        return (self.min_nodes or self.nodes) < self.nodes

    @model_validator(mode="after")
    def _rdzv_host(self):
        if self.rdzv_host is not None and not self.rdzv_host.strip():
            raise ValueError("launch.rdzv_host is empty: give a host name or address, e.g. 127.0.0.1")
        return self


class _Holder(_Section):
    launch: LaunchConfig  # so an error names the key as the config spells it: launch.nodes


def launch_section(mapping: dict | None, *, fix: str = "fix it in the config or with --set") -> LaunchConfig:
    """The train config's ``launch`` mapping, validated; defaults where it is absent. Bad input: one UsageError line."""
    try:
        return _Holder.model_validate({"launch": mapping or {}}).launch
    except ValidationError as err:
        raise validation_error(err, _Holder, fix=fix) from None


def _show(value: str) -> str:
    """A value for an error line; what looks like a credential is never echoed."""
    return "'<redacted>'" if SECRET_VALUE.search(value) or len(value) > 80 else repr(value)


def parse_duration(text: str) -> int:
    """Seconds from H:MM, HH:MM:SS, D-HH:MM:SS, or a number with s, m, h or d."""
    m = _DURATION.match(str(text).strip())
    if not m:
        raise ValueError(f"launch.time_limit={text!r} is not valid: allowed are HH:MM:SS, D-HH:MM:SS, or 90m, 2h, 1d")
    if m.group(6):
        return int(float(m.group(5)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(6)])
    days, hours, minutes, seconds = (int(g) if g else 0 for g in m.group(1, 2, 3, 4))
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


def slurm_time(seconds: int) -> str:
    """Slurm's D-HH:MM:SS."""
    d, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"

