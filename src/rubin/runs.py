"""The run directory, read and written in one place.

```
<run dir>/
  config.yaml     the resolved config
  env.json        environment fingerprint
  metrics.jsonl   one object per logged step
  eval.jsonl      one object per evaluation
  events.jsonl    one object per event: time, kind, details
  checkpoints/step-00000100/   MANIFEST.json + COMMITTED (written last)
  summary.json    status, steps, final_loss, param_digest, samples_per_s, eval, wall_s, exit reason
```

Rank 0 writes the shared files. Every JSONL line is flushed (and the small JSON files are
replaced atomically) so that a crash or a ``tail -f`` never sees half a record.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

CONFIG = "config.yaml"
ENV = "env.json"
METRICS = "metrics.jsonl"
EVAL = "eval.jsonl"
EVENTS = "events.jsonl"
SUMMARY = "summary.json"
CHECKPOINTS = "checkpoints"

EVENT_KINDS = (
    "start",
    "checkpoint_saved",
    "checkpoint_skipped",
    "checkpoint_loaded",
    "checkpoint_invalid",
    "resume",
    "preempted",
    "nan",
    "rollback",
    "restart",
    "hang",
    "warning",
    "end",
)


def _clean(obj: Any) -> Any:
    """Make a value JSON-safe: NaN/inf become None (JSON has no NaN), tuples become lists."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy / torch scalars
        return _clean(obj.item())
    return obj


def write_json_atomic(path: Path, data: Any) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(_clean(data), f, indent=2, sort_keys=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    with open(path) as f:
        return json.load(f)


def read_jsonl(path: Path, problems: list | None = None) -> list[dict]:
    """Every valid object line of a JSONL file.

    A torn line (crash or full disk mid-write), bytes that are not UTF-8 and lines that are not JSON
    objects are skipped, never fatal; each one is described in ``problems`` when a list is given,
    so a reader can report them.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    rows = []
    for n, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            row = None
        if isinstance(row, dict):
            rows.append(row)
        elif problems is not None:
            problems.append(f"{path}:{n}: skipped an invalid line ({len(line)} bytes)")
    return rows


def last_per_step(rows: list[dict]) -> list[dict]:
    """One row per step, the last one written, in step order.

    Steps re-done after a resume or a rollback are logged again; the later row is the one that
    counts. Rows without a step are dropped.
    """
    by_step: dict[int, dict] = {}
    for row in rows:
        if isinstance(row.get("step"), int):
            by_step[row["step"]] = row
    return [by_step[k] for k in sorted(by_step)]


class RunDir:
    """One training run's directory. Writers are no-ops on ranks other than 0."""

    def __init__(self, path: str | os.PathLike, *, rank: int = 0):
        self.path = Path(path)
        self.rank = rank
        self._files: dict[str, Any] = {}

    @property
    def is_writer(self) -> bool:
        return self.rank == 0

    @property
    def checkpoints(self) -> Path:
        return self.path / CHECKPOINTS

    def exists(self) -> bool:
        return (self.path / CONFIG).exists()

    def create(self) -> None:
        if self.is_writer:
            self.checkpoints.mkdir(parents=True, exist_ok=True)

    # -- whole files -------------------------------------------------------------
    def write_config(self, text: str) -> None:
        if self.is_writer:
            tmp = self.path / f".{CONFIG}.tmp"
            tmp.write_text(text)
            os.replace(tmp, self.path / CONFIG)

    def read_config_text(self) -> str | None:
        p = self.path / CONFIG
        return p.read_text() if p.exists() else None

    def write_env(self, env: dict) -> None:
        if self.is_writer:
            write_json_atomic(self.path / ENV, env)

    def write_summary(self, summary: dict) -> None:
        if self.is_writer:
            write_json_atomic(self.path / SUMMARY, summary)

    def read_summary(self) -> dict | None:
        p = self.path / SUMMARY
        return read_json(p) if p.exists() else None

    # -- line files --------------------------------------------------------------
    def _append(self, name: str, row: dict) -> None:
        if not self.is_writer:
            return
        f = self._files.get(name)
        if f is None:
            f = self._files[name] = open(self.path / name, "a", buffering=1)
        f.write(json.dumps(_clean(row), separators=(",", ":")) + "\n")
        f.flush()

    def log_metrics(self, row: dict) -> None:
        self._append(METRICS, row)

    def log_eval(self, row: dict) -> None:
        self._append(EVAL, row)

    def event(self, kind: str, **details: Any) -> dict:
        assert kind in EVENT_KINDS, kind  # internal invariant: kinds are a closed set
        row = {"time": time.time(), "kind": kind, "rank": self.rank, **details}
        self._append(EVENTS, row)
        return row

    def metrics(self) -> list[dict]:
        return read_jsonl(self.path / METRICS)

    def evals(self) -> list[dict]:
        return read_jsonl(self.path / EVAL)

    def events(self) -> list[dict]:
        return read_jsonl(self.path / EVENTS)

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
