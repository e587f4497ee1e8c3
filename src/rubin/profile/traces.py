"""Find and read the traces a profiled run wrote.

Layout (written by the trainer's profiling window, one pair per rank)::

    <run>/profile/rank-N.trace.json   a Chrome trace (torch.profiler), opens in Perfetto
    <run>/profile/rank-N.meta.json    {"run_id", "rank", "world_size", "host", "steps", "schedule", ...}

A trace cut short (a crash while it was written, a disk that filled) is read as far as it goes:
the events before the cut are analysed and the damage is named, never silently dropped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from rubin.errors import UsageError

PROFILE_DIR = "profile"
TRACE_RE = re.compile(r"^rank-(\d+)\.trace\.json$")


@dataclass
class RankTrace:
    rank: int
    path: Path
    events: list[dict]
    meta: dict = field(default_factory=dict)
    damage: str = ""  # empty when the file read whole


def _salvage(text: str) -> tuple[list[dict], str]:
    """The events of a JSON trace cut short: every whole event object before the cut."""
    start = text.find('"traceEvents"')
    if start < 0:
        return [], "no traceEvents array before the cut"
    i = text.find("[", start)
    dec, events = json.JSONDecoder(), []
    while i >= 0:
        j = i + 1
        while j < len(text) and text[j] in " \t\r\n,":
            j += 1
        if j >= len(text) or text[j] == "]":
            break
        try:
            obj, i = dec.raw_decode(text, j)
        except json.JSONDecodeError:
            break
        if isinstance(obj, dict):
            events.append(obj)
    return events, f"cut short after {len(text)} bytes; {len(events)} whole events read"


def read_trace(path: Path) -> tuple[dict, str]:
    """(trace object, damage) for one Chrome trace file; damage is '' for a whole file."""
    raw = path.read_bytes()
    text = raw.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
        if isinstance(data, dict) and isinstance(data.get("traceEvents"), list):
            return data, ""
        if isinstance(data, list):  # the bare-array form of the Chrome trace format
            return {"traceEvents": data}, ""
        return {"traceEvents": []}, "JSON without a traceEvents list"
    except json.JSONDecodeError:
        events, damage = _salvage(text)
        return {"traceEvents": events}, damage


def find(run_dir) -> list[Path]:
    d = Path(run_dir) / PROFILE_DIR
    if not d.is_dir():
        return []
    return sorted((p for p in d.iterdir() if TRACE_RE.match(p.name)), key=lambda p: int(TRACE_RE.match(p.name).group(1)))


def load(run_dir) -> list[RankTrace]:
    """Every rank's trace of RUN_DIR; refuses (exit 2) a dir without traces or traces from different runs."""
    run = Path(run_dir)
    if not run.is_dir():
        raise UsageError(f"RUN_DIR {str(run)!r} is not a directory; give the run.dir of a run trained with --profile")
    paths = find(run)
    if not paths:
        raise UsageError(f"RUN_DIR {str(run)!r} has no traces (no {PROFILE_DIR}/rank-N.trace.json); "
                         "train it with `rubin train CONFIG --profile` (or profile.enabled=true) first")
    out = []
    for p in paths:
        data, damage = read_trace(p)
        meta_path = p.with_name(p.name.replace(".trace.json", ".meta.json"))
        meta = {}
        if meta_path.is_file():
            try:
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                damage = damage or f"{meta_path.name} is not valid JSON"
        rank = int(TRACE_RE.match(p.name).group(1))
        events = [e for e in data["traceEvents"] if isinstance(e, dict)]
        out.append(RankTrace(rank, p, events, meta if isinstance(meta, dict) else {}, damage))
    _same_run(out)
    return out


def _same_run(traces: list[RankTrace]) -> None:
    ids = {t.rank: t.meta.get("run_id") for t in traces if t.meta.get("run_id")}
    if len(set(ids.values())) > 1:
        first = traces[0].rank
        other = next(r for r, v in ids.items() if v != ids.get(first, next(iter(ids.values()))))
        raise UsageError(f"traces from different runs: rank-{first} has run_id {ids.get(first)!r}, rank-{other} has "
                         f"{ids[other]!r}; keep one run's profile/ folder (profile it again rather than mixing runs)")
