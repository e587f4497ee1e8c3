"""The error knowledge base (data/knowledge.yaml), loaded and validated once."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

import yaml


@dataclass(frozen=True)
class Entry:
    id: str
    category: str
    title: str
    patterns: tuple[re.Pattern, ...]
    cause: str
    fix: tuple[str, ...]
    checks: tuple[str, ...]
    source: str


@functools.lru_cache(maxsize=1)
def entries() -> tuple[Entry, ...]:
    raw = yaml.safe_load(resources.files("rubin.doctor").joinpath("data", "knowledge.yaml").read_text())
    out, seen = [], set()
    for e in raw["entries"]:
        if e["id"] in seen:
            raise ValueError(f"duplicate knowledge-base id {e['id']!r}")
        seen.add(e["id"])
        out.append(Entry(e["id"], e["category"], e["title"], tuple(re.compile(p, re.I | re.M) for p in e["patterns"]),
                         e["cause"], tuple(e["fix"]), tuple(e.get("checks", [])), e["source"]))
    return tuple(out)
