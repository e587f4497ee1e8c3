"""Heartbeat: where each rank is (step and phase), in memory and in a small file per rank.

``beat`` is called several times per step, so it only updates memory and rewrites the file
at most every ``interval_s``. The watchdog thread calls ``flush`` every second too, so the
file shows the current phase even when the loop's thread is stuck and cannot write it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

PHASES = ("start", "data", "forward", "backward", "optimizer", "collective", "checkpoint", "eval")
HEARTBEATS = "heartbeats"


def heartbeat_path(run_dir: Path, rank: int) -> Path:
    return Path(run_dir) / HEARTBEATS / f"rank-{rank}.json"


class Heartbeat:
    def __init__(self, run_dir: str | os.PathLike, rank: int, *, interval_s: float = 1.0):
        self.run_dir, self.rank, self.interval_s = Path(run_dir), rank, interval_s
        self.path = heartbeat_path(self.run_dir, rank)
        self.step = -1
        self.phase = "start"
        self.step_changed_at = time.monotonic()  # monotonic: what the local watchdog measures
        self.beat_at = self.step_changed_at  # turned into wall time (comparable across ranks) only when written
        self.phase_changed_at = self.step_changed_at
        self._written_at = 0.0
        self._lock = threading.Lock()

    def beat(self, step: int, phase: str) -> None:
        now = time.monotonic()
        if step != self.step:
            self.step = step
            self.step_changed_at = now
        if phase != self.phase:
            self.phase_changed_at = now
        self.phase = phase
        self.beat_at = now
        if now - self._written_at >= self.interval_s:
            self.flush()

    def state(self) -> dict:
        wall = time.time()
        return {"rank": self.rank, "pid": os.getpid(), "step": self.step, "phase": self.phase,
                "beat_time": wall - (time.monotonic() - self.beat_at), "written_time": wall}

    def flush(self) -> None:
        """Rewrite this rank's file atomically (cheap: a few hundred bytes, no fsync)."""
        with self._lock:
            self._written_at = time.monotonic()
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                tmp = self.path.with_name(f".{self.path.name}.tmp")
                tmp.write_text(json.dumps(self.state()))
                os.replace(tmp, self.path)
            except OSError:  # a full or vanished run dir must not kill training over a heartbeat
                pass


def read_all(run_dir: Path, world_size: int) -> dict[int, dict | None]:
    out: dict[int, dict | None] = {}
    for r in range(world_size):
        try:
            out[r] = json.loads(heartbeat_path(run_dir, r).read_text())
        except (OSError, ValueError):
            out[r] = None
    return out
