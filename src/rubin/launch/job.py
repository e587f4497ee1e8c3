"""Resolve ``rubin launch TARGET CONFIG`` into a ``Job``: every check runs here, before anything is written.

A job runs ``torchrun`` (c10d rendezvous, ``max_restarts``) around ``python -m rubin train CONFIG``
on every node. What differs per target is only how the nodes, the rendezvous host and the
preemption signal are wired; the target modules render that from the ``Job``.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from rubin.errors import UsageError, bad_choice, load_mapping
from rubin.launch.partition import partition_limit
from rubin.launch.spec import SECRET_VALUE, LaunchConfig, launch_section, parse_duration

TARGETS = ("local", "slurm", "k8s", "azureml", "skypilot")
CONTAINER_TARGETS = ("k8s", "azureml", "skypilot")
# Paths that live on one machine's own disk (or memory): a restarted or second node never sees them.
NODE_LOCAL = ("/tmp", "/var/tmp", "/dev/shm", "/run", "/scratch/local", "/local", "/mnt/local", "/localscratch", "/mnt/resource")
MARGIN_S = 30  # between the signal and the save: finishing the current step and agreeing to stop


@dataclass
class Job:
    target: str
    launch: LaunchConfig
    name: str
    config_path: str  # as the job sees it
    train_sets: list[str]  # --set items for `rubin train` inside the job (never launch.*)
    run_dir: str  # as the job sees it
    grace_s: int
    time_limit_s: int | None
    preemption_grace_s: float
    warnings: list[str] = field(default_factory=list)

    @property
    def nproc(self) -> int:
        return self.launch.gpus_per_node

    def train_args(self) -> list[str]:
        args = ["-m", "rubin", "train", self.config_path, "--set", f"run.dir={self.run_dir}"]
        for item in self.train_sets:
            args += ["--set", item]
        return args

    def torchrun(self, *, endpoint: str, rdzv_id: str, nnodes: str | None = None, extra: tuple = ()) -> list[str]:
        """The torchrun command every node runs: c10d rendezvous, max restarts, then rubin train."""
        lc = self.launch
        return [
            lc.python, "-m", "torch.distributed.run",
            f"--nnodes={nnodes or lc.nodes}", f"--nproc-per-node={self.nproc}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={rdzv_id}",
            f"--max-restarts={lc.max_restarts}", *extra, *self.train_args(),
        ]


def shell_join(argv: list[str], keep_vars: bool = True) -> str:
    """Quote for bash, but leave ``$VAR``/``${VAR}`` references live (in double quotes) where keep_vars."""
    out = []
    for a in argv:
        if keep_vars and "$" in a and re.fullmatch(r'[\w.:=/@${}-]+', a):
            out.append(f'"{a}"')
        else:
            out.append(shlex.quote(a))
    return " ".join(out)


def job_name(raw: str) -> str:
    """A name every target accepts (Kubernetes is the strictest: DNS-1123, lowercase)."""
    name = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")[:40].strip("-")
    return name or "rubin-job"


def load_launch_config(config: str, sets: list[str], launch_file: str | None):
    """The train config (with its launch section validated) and the resolved LaunchConfig."""
    from rubin.train.config import load_config

    data = load_mapping(config, "config file", fix="pass a train config YAML (see examples/)")
    if launch_file:
        extra = load_mapping(launch_file, "launch file", fix="pass a YAML file with the launch keys (see rubin launch --help)")
        if set(extra) == {"launch"} and isinstance(extra["launch"], dict):
            extra = extra["launch"]
        data["launch"] = {**(data.get("launch") or {}), **extra}
    cfg = load_config(None, sets, base=data)
    return cfg, launch_section(cfg.launch)


def resolve(target: str, config: str, sets: list[str] | None = None, launch_file: str | None = None,
            *, cwd: str | None = None, env: dict | None = None) -> Job:
    if target not in TARGETS:
        raise bad_choice("TARGET", target, TARGETS, "e.g. rubin launch slurm train.yaml --dry-run")
    sets = list(sets or [])
    env = dict(os.environ if env is None else env)
    cfg, lc = load_launch_config(config, sets, launch_file)
    train_sets = [s for s in sets if not s.split("=", 1)[0].strip().startswith("launch.")]
    for item in train_sets:
        if SECRET_VALUE.search(item):
            raise UsageError(f"--set {item.split('=', 1)[0]}=<redacted> holds what looks like a credential, and --set values are "
                             "written into the job file: put it in the environment and list its name under launch.secrets")

    pg = cfg.checkpoint.preemption_grace_s
    grace = lc.grace_s if lc.grace_s is not None else math.ceil(pg) + MARGIN_S
    if grace < pg:
        raise UsageError(f"launch.grace_s={grace} is not valid: it must cover checkpoint.preemption_grace_s={pg:g}, "
                         f"the time the ranks are given to save; set launch.grace_s >= {math.ceil(pg)}")
    limit = parse_duration(lc.time_limit) if lc.time_limit else None
    if limit is not None and limit <= grace:
        raise UsageError(f"launch.time_limit={lc.time_limit!r} is not valid: it is not longer than the grace period "
                         f"launch.grace_s={grace}, so no step would run before the signal; set a longer time_limit")

    base = Path(lc.workdir or cwd or os.getcwd())
    run_dir = lc.run_dir or cfg.run.dir or f"runs/{cfg.run.name}"
    config_path = config
    if target in ("local", "slurm"):  # one shared filesystem: absolute paths mean the same on every node
        run_dir = str(base / run_dir) if not run_dir.startswith("/") else run_dir
        config_path = str(Path(cwd or os.getcwd()) / config) if not config.startswith("/") else config
    job = Job(target, lc, job_name(lc.name or cfg.run.name), config_path, train_sets, run_dir, grace, limit, pg)

    if target == "local":  # the ranks start here: a bad model or data argument is one line now, not one per rank
        from rubin.workloads.registry import check_arguments

        check_arguments((cfg.model.name, cfg.model.import_, cfg.model.args), (cfg.data.name, cfg.data.import_, cfg.data.args))
    _check_target(job, env)
    _check_run_dir(job, env)
    job.warnings += grace_warnings(Path(run_dir) if target in ("local", "slurm") else None, grace)
    return job


def _check_target(job: Job, env: dict) -> None:
    lc, t = job.launch, job.target
    if t in ("k8s", "azureml") and not lc.image:
        raise UsageError(f"launch.image is missing: {t} runs a container image; set launch.image to an image with rubin and torch, "
                         "e.g. --set launch.image=ghcr.io/you/train:1.0")
    if t == "azureml" and not lc.compute:
        raise UsageError("launch.compute is missing: an Azure ML job runs on a compute cluster; set launch.compute=<cluster name>")
    for name, ref in lc.secrets.items():
        if t == "k8s" and not (ref and ref.k8s):
            raise UsageError(f"launch.secrets.{name} has no k8s reference: Kubernetes passes secrets by secretKeyRef; "
                             f"set launch.secrets.{name}.k8s=SECRET/KEY (kubectl create secret generic SECRET --from-literal=KEY=...)")
        if t == "azureml" and not (ref and ref.key_vault):
            raise UsageError(f"launch.secrets.{name} has no key_vault reference: Azure ML jobs read secrets from a Key Vault; "
                             f"set launch.secrets.{name}.key_vault=VAULT/SECRET")
    if t == "slurm":
        cap, what = partition_limit(lc.partition, gpu=lc.accelerator == "gpu")
        if cap == 0 and lc.accelerator == "gpu":  # "gpus_per_node <= 0" would be no advice at all
            raise UsageError(f"launch.accelerator='gpu' is not valid here: {what} offers no GPUs (a CPU partition); "
                             "set launch.accelerator=cpu to run CPU ranks there, or launch.partition=<a GPU partition> "
                             "(sinfo -o '%P %G' lists each partition's GPUs)")
        if cap is not None and lc.gpus_per_node > cap:
            raise UsageError(f"launch.gpus_per_node={lc.gpus_per_node} is not valid: {what} offers {cap} per node; "
                             f"set launch.gpus_per_node <= {cap} or pick another partition")


def _is_remote(host: str | None) -> bool:
    return host not in (None, "127.0.0.1", "localhost", "::1")


def node_local(path: str, env: dict) -> str | None:
    """Why PATH is on one node's own disk, or None."""
    p = str(PurePosixPath(path))
    tmp = env.get("TMPDIR")
    prefixes = NODE_LOCAL + ((tmp.rstrip("/"),) if tmp and tmp.rstrip("/") not in ("", "/") else ())
    for pre in prefixes:
        if p == pre or p.startswith(pre + "/"):
            return f"{pre} is a directory on each node's own disk"
    return None


def _check_run_dir(job: Job, env: dict) -> None:
    lc = job.launch
    shared_on_one_host = job.target == "local" and not _is_remote(lc.rdzv_host)
    if lc.nodes < 2 or shared_on_one_host:
        return
    why = None
    if job.target in CONTAINER_TARGETS:
        writable = [m.path for m in lc.mounts if not m.read_only]
        rd = job.run_dir if job.run_dir.startswith("/") else str(PurePosixPath(lc.workdir or "/") / job.run_dir)
        if not any(rd == m or rd.startswith(m.rstrip("/") + "/") for m in writable):
            why = "it is not under a writable mount, so it lives on the container's own disk"
    why = why or node_local(job.run_dir, env)
    if why:
        raise UsageError(f"run dir {job.run_dir!r} is node-local ({why}) but launch.nodes={lc.nodes}: other nodes and restarts "
                         "would not see its checkpoints; put it on shared storage with launch.run_dir (and a writable launch.mounts entry)")


def grace_warnings(run_dir: Path | None, grace: int) -> list[str]:
    """A warning when this run dir's earlier checkpoint saves took longer than the grace period."""
    if run_dir is None:
        return []
    from rubin import runs

    saves = [e for e in runs.read_jsonl(run_dir / runs.EVENTS) if e.get("kind") == "checkpoint_saved"
             and isinstance(e.get("seconds"), (int, float))]
    if not saves:
        return []
    slowest = max(saves, key=lambda e: e["seconds"])
    if slowest["seconds"] <= grace:
        return []
    return [f"the run dir's checkpoint at step {slowest.get('step', '?')} took {slowest['seconds']:.1f} s to save, longer than "
            f"the {grace} s grace period: an emergency save on preemption may be killed; raise launch.grace_s "
            "(and checkpoint.preemption_grace_s) or save less"]
