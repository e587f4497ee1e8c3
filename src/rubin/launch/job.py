"""What a launch job is: the ``Job`` every target renders, and the checks the targets share.

A job runs ``torchrun`` (c10d rendezvous, ``max_restarts``) around ``python -m rubin train CONFIG``
on every node. What differs per target is only how the nodes, the rendezvous host and the
preemption signal are wired; the target modules render that from the ``Job`` (``resolve.py``
builds it).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from rubin.errors import UsageError
from rubin.launch.spec import LaunchConfig

# torch's shared rendezvous store caches round 0's bootstrap address, so a replacement node's agent waits
# forever for the next round's (docs/faults.md, "Losing a node"): every job file turns the sharing off.
SHARED_STORE_OFF = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"
# Paths that live on one machine's own disk (or memory): a restarted or second node never sees them.
NODE_LOCAL = ("/tmp", "/var/tmp", "/dev/shm", "/run", "/scratch/local", "/local", "/mnt/local", "/localscratch", "/mnt/resource")


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
        return [self.launch.python, "-m", "torch.distributed.run",
                *self.torchrun_args(endpoint=endpoint, rdzv_id=rdzv_id, nnodes=nnodes, extra=extra)]

    def torchrun_args(self, *, endpoint: str, rdzv_id: str, nnodes: str | None = None, extra: tuple = ()) -> list[str]:
        lc = self.launch
        conf = [f"join_timeout={lc.rdzv_join_timeout_s}"] if lc.rdzv_join_timeout_s else []
        conf += [f"last_call_timeout={lc.rdzv_last_call_s}"] if lc.rdzv_last_call_s else []
        return [
            f"--nnodes={nnodes or lc.nnodes}", f"--nproc-per-node={self.nproc}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={rdzv_id}",
            *([f"--rdzv-conf={','.join(conf)}"] if conf else []),
            f"--max-restarts={lc.max_restarts}", *extra, *self.train_args(),
        ]

    def agent(self, *, endpoint: str, rdzv_id: str, extra: tuple = ()) -> list[str]:
        """What every node of a multi-host job runs: rubin's agent (``launch/agent.py``) around torchrun."""
        lc = self.launch
        return [lc.python, "-m", "rubin.launch.agent", "--run-dir", self.run_dir, f"--rejoin-s={lc.rejoin_timeout_s}",
                f"--rejoins={lc.max_restarts}", "--", *self.torchrun_args(endpoint=endpoint, rdzv_id=rdzv_id, extra=extra)]


@dataclass
class Launched:
    """What `rubin launch` did: the file, the scheduler's job id and how to follow it, or a local run's exit code."""

    target: str
    text: str
    file: str | None = None
    job_id: str | None = None
    follow: str | None = None
    exit_code: int = 0
    warnings: list[str] = field(default_factory=list)


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


def node_local(path: str, env: dict) -> str | None:
    """Why PATH is on one node's own disk, or None."""
    p = str(PurePosixPath(path))
    tmp = env.get("TMPDIR")
    prefixes = NODE_LOCAL + ((tmp.rstrip("/"),) if tmp and tmp.rstrip("/") not in ("", "/") else ())
    for pre in prefixes:
        if p == pre or p.startswith(pre + "/"):
            return f"{pre} is a directory on each node's own disk"
    return None


def check_run_dir(job: Job, env: dict, *, container: bool) -> None:
    """A job on several machines needs its run dir on storage they all see: under a writable mount
    (a CONTAINER target), or on no node's own disk."""
    lc = job.launch
    if lc.nodes < 2:
        return
    why = None
    if container:
        writable = [m.path for m in lc.mounts if not m.read_only]
        rd = job.run_dir if job.run_dir.startswith("/") else str(PurePosixPath(lc.workdir or "/") / job.run_dir)
        if not any(rd == m or rd.startswith(m.rstrip("/") + "/") for m in writable):
            why = "it is not under a writable mount, so it lives on the container's own disk"
    why = why or node_local(job.run_dir, env)
    if why:
        raise UsageError(f"run dir {job.run_dir!r} is node-local ({why}) but launch.nodes={lc.nodes}: other nodes and restarts "
                         "would not see its checkpoints; put it on shared storage with launch.run_dir (and a writable launch.mounts entry)")


def require_image(job: Job) -> None:
    if not job.launch.image:
        raise UsageError(f"launch.image is missing: {job.target} runs a container image; set launch.image to an image with rubin "
                         "and torch, e.g. --set launch.image=ghcr.io/you/train:1.0")


def refuse_elastic(job: Job) -> None:
    """Targets that run a fixed number of machines refuse launch.nodes MIN:MAX in one line."""
    lc = job.launch
    if lc.elastic:
        raise UsageError(f"launch.nodes={lc.nnodes!r} is not valid for {job.target}: it runs a fixed number of machines (a lost one "
                         f"is replaced, and the job resumes from its last checkpoint); set launch.nodes={lc.nodes}, or use the "
                         "local or slurm target for an elastic job")
