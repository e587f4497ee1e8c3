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

Rank 0 writes the shared files. Every JSONL line goes out in one ``write`` on an append-only
descriptor and is cut back if that fails, and the small JSON files are replaced atomically, so a
crash, a full disk or a ``tail -f`` never sees half a record. Readers still skip and report a bad
line (one written by another tool, or bytes damaged on disk) rather than fail on it. Events and
the saved config pass through ``rubin.redact`` so that no credential lands in the run dir.
"""

from __future__ import annotations

import errno
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from rubin.redact import redact, redact_obj

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
    "checkpoint_quarantined",
    "resume",
    "world_size_changed",
    "preempted",
    "nan",
    "rollback",
    "restart",
    "hang",
    "warning",
    "lock_taken_over",
    "profile",
    "straggler",
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


def append_line(fd: int, line: bytes, path: Path, checkpoints: Path | None = None) -> None:
    """Append LINE whole or not at all: one ``write`` on an O_APPEND descriptor, cut back on failure.

    A short write or a full disk would leave half a JSON object that every later line is glued
    to; instead the file is truncated back to where it was and the failure is one clear error.
    """
    start = os.lseek(fd, 0, os.SEEK_END)
    try:
        written = os.write(fd, line)
        if written != len(line):
            raise OSError(errno.ENOSPC, f"short write ({written} of {len(line)} bytes)")
    except OSError as err:
        try:
            os.ftruncate(fd, start)
        except OSError:
            pass
        raise log_write_error(path, err, checkpoints) from err


def _ends_torn(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except OSError:
        return False


def log_write_error(path: Path, err: OSError, checkpoints: Path | None):
    from rubin.errors import RubinError

    full = err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    what = "disk full" if full else (err.strerror or str(err))
    kept = "; the previous committed checkpoint is kept" if checkpoints is not None and _has_committed(checkpoints) else ""
    fix = "free space on that disk or set run.dir elsewhere, then rerun to resume" if full else "check the run dir, then rerun"
    return RubinError(f"could not write {path}: {what}: the line was not written{kept}; {fix}")


def _has_committed(checkpoints: Path) -> bool:
    try:
        return any((p / "COMMITTED").is_file() for p in Path(checkpoints).iterdir() if p.name.startswith("step-"))
    except OSError:
        return False


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

    def lock(self):
        """Take this run dir's exclusive lock (rank 0, creating the dir); see ``rubin.runlock``."""
        from rubin import runlock

        runlock.check_writable_dir(self.path)
        return runlock.acquire(self.path)

    def create(self) -> None:
        if self.is_writer:
            self.checkpoints.mkdir(parents=True, exist_ok=True)

    # -- whole files -------------------------------------------------------------
    def write_config(self, text: str) -> None:
        """Write the resolved config (secrets in it redacted: the run dir is often shared)."""
        if self.is_writer:
            tmp = self.path / f".{CONFIG}.tmp"
            tmp.write_text(redact(text))
            os.replace(tmp, self.path / CONFIG)

    def read_config_text(self) -> str | None:
        p = self.path / CONFIG
        return p.read_bytes().decode("utf-8", errors="replace") if p.exists() else None  # damaged bytes never crash a reader

    def read_config(self) -> dict | None:
        """The saved config as a mapping, None when there is none; a garbled one is a one-line UsageError."""
        from rubin.errors import load_mapping

        p = self.path / CONFIG
        if not p.exists() and not p.is_symlink():
            return None
        return load_mapping(p, "the run dir's config", f"move {str(self.path)!r} aside or use another run.dir")

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
        path = self.path / name
        fd = self._files.get(name)
        if fd is None:
            fd = self._files[name] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            if _ends_torn(path):  # a line torn by an older writer or a crash: never glue the next one to it
                append_line(fd, b"\n", path, self.checkpoints)
        append_line(fd, (json.dumps(_clean(row), separators=(",", ":")) + "\n").encode(), path, self.checkpoints)

    def log_metrics(self, row: dict) -> None:
        self._append(METRICS, row)

    def log_eval(self, row: dict) -> None:
        self._append(EVAL, row)

    def event(self, kind: str, **details: Any) -> dict:
        assert kind in EVENT_KINDS, kind  # internal invariant: kinds are a closed set
        row = {"time": time.time(), "kind": kind, "rank": self.rank, **redact_obj(details)}
        self._append(EVENTS, row)
        return row

    def damaged_lines(self) -> list[str]:
        """Every line of the JSONL files that readers skip (torn, not UTF-8, not an object), described."""
        problems: list[str] = []
        for name in (METRICS, EVAL, EVENTS):
            read_jsonl(self.path / name, problems)
        return problems

    def metrics(self) -> list[dict]:
        return read_jsonl(self.path / METRICS)

    def evals(self) -> list[dict]:
        return read_jsonl(self.path / EVAL)

    def events(self) -> list[dict]:
        return read_jsonl(self.path / EVENTS)

    def close(self) -> None:
        """Close the line files; the writer also gives up the run dir's lock (if this process holds it)."""
        if self.is_writer:
            from rubin import runlock

            runlock.release(self.path)
        for fd in self._files.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._files.clear()
