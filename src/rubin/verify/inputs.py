"""Read the run dirs on each side of a verify: config, summary, loss curve, evals, events, env."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from rubin.errors import UsageError, load_yaml_text
from rubin.runs import ENV, EVAL, EVENTS, METRICS, RunDir, last_per_step, read_json, read_jsonl

# Keys that name where a run lives, not what it computes.
PLACE_KEYS = ("run.dir", "run.name")
# What makes two runs the same workload: the model and the data set (not batch, lr, precision, ...).
WORKLOAD_KEYS = ("model.name", "model.import", "model.args", "data.name", "data.import", "data.path")


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and k != "args":  # model.args / data.args compare as one value
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def config_hash(flat: dict, *, ignore=PLACE_KEYS) -> str:
    kept = {k: v for k, v in sorted(flat.items()) if k not in ignore}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class Run:
    path: Path
    config: dict  # flattened
    summary: dict
    loss: dict[int, float]  # step -> loss (the last row written per step)
    evals: list[dict]  # one row per eval step, in order
    event_counts: dict[str, int]
    env: dict
    problems: list[str] = field(default_factory=list)

    @property
    def seed(self):
        return self.config.get("run.seed")

    @property
    def world_size(self) -> int:
        return int(self.summary.get("world_size") or 1)

    @property
    def global_batch(self):
        return self.config.get("data.batch_size")


def load_run(path) -> Run:
    p = Path(path)
    rd = RunDir(p)
    if not p.is_dir():
        raise UsageError(f"run dir {str(p)!r} does not exist (or is not a directory); pass a directory written by `rubin train`")
    text = rd.read_config_text()
    if text is None:
        raise UsageError(f"{str(p)!r} is not a run dir: it has no config.yaml; pass a directory written by `rubin train`")
    cfg = load_yaml_text(text, f"{p / 'config.yaml'}")
    if not isinstance(cfg, dict):
        raise UsageError(f"{p / 'config.yaml'} does not hold a config mapping; pass a directory written by `rubin train`")
    try:
        summary = rd.read_summary()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UsageError(f"{p / 'summary.json'} is not valid JSON; the run did not finish cleanly, rerun it") from None
    if summary is None:
        raise UsageError(f"run dir {str(p)!r} has no summary.json: the run has not finished; verify finished runs only")
    problems: list[str] = []
    metrics = last_per_step(read_jsonl(p / METRICS, problems))
    loss = {r["step"]: float(r["loss"]) for r in metrics if isinstance(r.get("loss"), (int, float))}
    evals = last_per_step(read_jsonl(p / EVAL, problems))
    counts: dict[str, int] = {}
    for e in read_jsonl(p / EVENTS, problems):
        counts[e.get("kind", "?")] = counts.get(e.get("kind", "?"), 0) + 1
    env = {}
    if (p / ENV).is_file():
        try:
            env = read_json(p / ENV)
        except (json.JSONDecodeError, UnicodeDecodeError):
            problems.append(f"{p / ENV}: not valid JSON, environment diff skipped")
    if not loss:
        raise UsageError(f"run dir {str(p)!r} has no loss in metrics.jsonl; set telemetry.log_every_steps and rerun")
    return Run(p, flatten(cfg), summary, loss, evals, counts, env, problems)


def load_side(paths, side: str) -> list[Run]:
    """Run dirs (or already loaded runs) of one side, checked to be seeds of one config."""
    runs = [x if isinstance(x, Run) else load_run(x) for x in paths]
    seen = {}
    for r in runs:
        key = r.path.resolve()
        if key in seen:
            raise UsageError(f"{side} run dir {str(r.path)!r} is given twice; each seed counts once")
        seen[key] = r
    # Several dirs on one side are seeds of one config: anything else differing is a mistake.
    first = runs[0]
    for r in runs[1:]:
        diff = config_diff(first.config, r.config, ignore=PLACE_KEYS + ("run.seed",))
        if diff:
            k, a, b = diff[0]
            raise UsageError(f"{side} run dirs are not seeds of one config: {k}={b!r} in {str(r.path)!r} but {a!r} in "
                             f"{str(first.path)!r}; pass runs that differ only in run.seed on one side")
    return runs


def check_same_workload(base: list[Run], new: list[Run]) -> None:
    a, b = base[0], new[0]
    for k in WORKLOAD_KEYS:
        if a.config.get(k) != b.config.get(k):
            raise UsageError(f"the run dirs are of different workloads: {k}={b.config.get(k)!r} in {str(b.path)!r} but "
                             f"{a.config.get(k)!r} in {str(a.path)!r}; verify compares the same model and data on two platforms")


def config_diff(a: dict, b: dict, ignore=PLACE_KEYS) -> list[tuple[str, object, object]]:
    keys = sorted(set(a) | set(b))
    return [(k, a.get(k), b.get(k)) for k in keys if k not in ignore and a.get(k) != b.get(k)]
