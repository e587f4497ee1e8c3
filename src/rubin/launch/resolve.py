"""Resolve ``rubin launch TARGET CONFIG`` into a ``Job``: every check runs here, before anything is written."""

from __future__ import annotations

import math
import os
from pathlib import Path

from rubin.errors import UsageError, load_mapping
from rubin.launch import targets
from rubin.launch.job import Job, job_name
from rubin.launch.spec import SECRET_VALUE, launch_section, parse_duration

MARGIN_S = 30  # between the signal and the save: finishing the current step and agreeing to stop


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
    kind = targets.get(target)
    sets = list(sets or [])
    env = dict(os.environ if env is None else env)
    cfg, lc = load_launch_config(config, sets, launch_file)
    train_sets = [s for s in sets if not s.split("=", 1)[0].strip().startswith("launch.")]
    for item in train_sets:
        if SECRET_VALUE.search(item):
            raise UsageError(f"--set {item.split('=', 1)[0]}=<redacted> holds what looks like a credential, and --set values are "
                             "written into the job file: put it in the environment and list its name under launch.secrets")

    if lc.nodes > 1 and cfg.faults.hang_timeout_s is None:  # a silent partition ends in minutes, not the group timeout
        train_sets.append(f"faults.hang_timeout_s={lc.hang_timeout_s:g}")
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
    if not kind.CONTAINER:  # one shared filesystem: absolute paths mean the same on every node
        run_dir = str(base / run_dir) if not run_dir.startswith("/") else run_dir
        config_path = str(Path(cwd or os.getcwd()) / config) if not config.startswith("/") else config
    job = Job(kind.NAME, lc, job_name(lc.name or cfg.run.name), config_path, train_sets, run_dir, grace, limit, pg)
    kind.check(job, cfg, env)
    job.warnings += grace_warnings(None if kind.CONTAINER else Path(run_dir), grace)
    return job


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
