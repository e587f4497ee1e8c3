"""Write a job file and hand it to the target's own CLI: the steps every target shares.

Order matters: every check (config, target, run dir, secrets, the CLI being installed, the output
file) runs before the first byte is written, so a refused launch leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

from rubin.errors import RubinError, UsageError
from rubin.launch.job import Job, Launched
from rubin.launch.target import Target


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


def check_submit(target: Target, job: Job, env: dict) -> None:
    """Everything submission needs that can be checked before writing: the program and the secrets."""
    prog = target.SUBMIT
    if prog and shutil.which(prog, path=env.get("PATH")) is None:
        raise UsageError(f"{prog} is not installed (not found on PATH): rubin launch {job.target} submits with it; "
                         f"{target.INSTALL}; or pass --dry-run to only write the {job.target} file")
    if target.SECRETS_FROM_SHELL:
        missing = [name for name in job.launch.secrets if not env.get(name)]
        if missing:
            raise UsageError(f"launch.secrets.{missing[0]}: {missing[0]} is not set in this environment; export it before "
                             f"rubin launch {job.target} (the scheduler passes its value on; it is never written)")


def hand_over(job: Job, text: str, out: str | None, env: dict, *, extension: str,
              argv: Callable[[str, Job], list[str]], job_id: Callable[[str], str | None],
              follow: Callable[[str, Job], str]) -> Launched:
    """Write the job file (OUT, or a temporary file), run ARGV(path, job) on it, and read the job id from its stdout."""
    path = out
    if out:
        write(out, text)
    else:
        fd, path = tempfile.mkstemp(prefix=f"rubin-{job.name}-", suffix="." + extension)
        with os.fdopen(fd, "w") as f:
            f.write(text)
    try:
        command = argv(path, job)
        try:
            proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
        except subprocess.TimeoutExpired:
            raise RubinError(f"{' '.join(command)} did not answer in 600 s; check the scheduler, then rerun") from None
    finally:
        if not out:
            os.unlink(path)
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1]
        raise RubinError(f"{command[0]} refused the job (exit {proc.returncode}): {tail}")
    result = Launched(job.target, text, out, warnings=list(job.warnings))
    result.job_id = job_id(proc.stdout)
    result.follow = follow(result.job_id, job) if result.job_id else None
    return result
