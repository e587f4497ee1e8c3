"""Render a job for its target, write it, and hand it to the target's own CLI.

Order matters: every check (config, target, run dir, secrets, the CLI being installed, the output
file) runs before the first byte is written, so a refused launch leaves nothing behind.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from rubin.errors import RubinError, UsageError
from rubin.launch.job import Job

EXTENSIONS = {"local": "sh", "slurm": "sbatch", "k8s": "yaml", "azureml": "yaml", "skypilot": "yaml"}
FROM_SHELL = ("local", "slurm", "skypilot")  # targets whose secrets come from the submitting environment


@dataclass
class Launched:
    target: str
    text: str
    file: str | None = None
    job_id: str | None = None
    follow: str | None = None
    exit_code: int = 0
    warnings: list[str] = field(default_factory=list)


def target_module(target: str):
    return importlib.import_module(f"rubin.launch.{target}")


def render(job: Job) -> str:
    return target_module(job.target).render(job)


def check_out(out: str | None, text: str, force: bool) -> None:
    if not out:
        return
    p = Path(out)
    if p.is_dir():
        raise UsageError(f"--out {out!r} is a directory: give a file name, e.g. --out job.yaml")
    if p.exists() and not force and p.read_text(errors="replace") != text:
        raise UsageError(f"--out {out!r} already exists with other content: pick another name, or pass --force to replace it")
    if not p.parent.exists():
        raise UsageError(f"--out {out!r}: the folder {str(p.parent)!r} does not exist; create it first")


def write(out: str, text: str) -> None:
    p = Path(out)
    tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    if text.startswith("#!"):  # a script: runnable as it is
        tmp.chmod(0o755)
    os.replace(tmp, p)


def check_submit(job: Job, env: dict) -> None:
    """Everything submission needs that can be checked before writing: the program and the secrets."""
    mod = target_module(job.target)
    prog = getattr(mod, "SUBMIT", None)
    if prog and shutil.which(prog, path=env.get("PATH")) is None:
        raise UsageError(f"{prog} is not installed (not found on PATH): rubin launch {job.target} submits with it; "
                         f"{mod.INSTALL}; or pass --dry-run to only write the {job.target} file")
    if job.target == "local":
        check_local_gpus(job)
    if job.target in FROM_SHELL:
        missing = [name for name in job.launch.secrets if not env.get(name)]
        if missing:
            raise UsageError(f"launch.secrets.{missing[0]}: {missing[0]} is not set in this environment; export it before "
                             f"rubin launch {job.target} (the scheduler passes its value on; it is never written)")


def check_local_gpus(job: Job) -> None:
    """Agents started here share this machine's GPUs: it must have nodes x gpus_per_node of them (NVML)."""
    lc = job.launch
    if lc.accelerator != "gpu" or (lc.rdzv_host not in (None, "127.0.0.1", "localhost", "::1")):
        return
    from rubin.platform import nvml

    handle = nvml.get()
    try:
        count = handle.device_count() if handle is not None else 0
    except nvml.NvmlError:
        count = 0
    need = lc.nodes * lc.gpus_per_node
    if count < need:
        why = "" if handle is not None else f" (NVML: {nvml.load_error()[0] or 'not available'})"
        raise UsageError(f"launch.gpus_per_node={lc.gpus_per_node} is not valid: {lc.nodes} node(s) x {lc.gpus_per_node} GPUs "
                         f"on this machine need {need}, and it has {count}{why}; ask for fewer, "
                         "or set launch.accelerator=cpu for CPU ranks")


def submit(job: Job, text: str, out: str | None, env: dict, say=print) -> Launched:
    mod = target_module(job.target)
    result = Launched(job.target, text, out, warnings=list(job.warnings))
    if job.target == "local":
        from rubin.launch import local

        if out:
            write(out, text)
        result.exit_code = local.run(job, say=say)
        return result
    if job.target == "slurm":  # sbatch --output needs the folder to exist
        os.makedirs(job.run_dir, exist_ok=True)
    path = out
    if out:
        write(out, text)
    else:
        fd, path = tempfile.mkstemp(prefix=f"rubin-{job.name}-", suffix="." + EXTENSIONS[job.target])
        with os.fdopen(fd, "w") as f:
            f.write(text)
    try:
        argv = mod.submit_argv(path, job)
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
        except subprocess.TimeoutExpired:
            raise RubinError(f"{' '.join(argv)} did not answer in 600 s; check the scheduler, then rerun") from None
    finally:
        if not out:
            os.unlink(path)
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1]
        raise RubinError(f"{argv[0]} refused the job (exit {proc.returncode}): {tail}")
    result.job_id = mod.parse_job_id(proc.stdout)
    result.follow = mod.follow(result.job_id, job) if result.job_id else None
    return result
