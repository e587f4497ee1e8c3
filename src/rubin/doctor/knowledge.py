"""The error knowledge base (data/knowledge.yaml): validated once, with a BM25 index over its text."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from rubin.doctor import textmatch


@dataclass(frozen=True)
class Cause:
    cause: str  # one known cause of the error, most common first
    tell: str  # the fact that confirms this cause rather than the others


# The entry schema: field -> (type, required). Checked by hand rather than with pydantic: this is
# rubin's own data, loaded on every --explain, and building pydantic models costs more than the
# whole match (the budget is one second for a 200-line log).
_FIELDS = {
    "id": (str, True), "category": (str, True), "title": (str, True), "patterns": (list, True), "cause": (str, True),
    "confirm": (str, True), "fix": (list, True), "source": (str, True), "variants": (list, False),
    "causes": (list, False), "checks": (list, False), "generic": (bool, False), "requires": (str, False),
}


def _validate(raw: dict) -> None:
    from rubin.errors import did_you_mean

    if not isinstance(raw, dict) or not {"schema_version", "collect", "entries"} <= set(raw):
        raise ValueError("knowledge.yaml needs schema_version, collect and entries")
    if "general" not in raw["collect"]:
        raise ValueError("knowledge.yaml collect needs a 'general' list")
    seen: set[str] = set()
    for i, e in enumerate(raw["entries"]):
        where = f"knowledge.yaml entry {e.get('id', i)!r}"
        for key in e:
            if key not in _FIELDS:
                raise ValueError(f"{where}: unknown field {key!r}{did_you_mean(key, _FIELDS)}")
        for key, (kind, required) in _FIELDS.items():
            if required and not e.get(key):
                raise ValueError(f"{where}: {key} is missing or empty")
            if key in e and not isinstance(e[key], kind):
                raise ValueError(f"{where}: {key} must be a {kind.__name__}")
        if not re.fullmatch(r"[a-z][a-z0-9_]*", e["id"]) or e["id"] in seen:
            raise ValueError(f"{where}: the id must be unique, lower_snake_case")
        seen.add(e["id"])
        for c in e.get("causes", []):
            if set(c) != {"cause", "tell"}:
                raise ValueError(f"{where}: each of causes needs exactly 'cause' and 'tell'")


@dataclass(frozen=True)
class Entry:
    id: str
    category: str
    title: str
    patterns: tuple[Pattern, ...]
    cause: str
    fix: tuple[str, ...]
    checks: tuple[str, ...]
    source: str
    confirm: str = ""
    causes: tuple[Cause, ...] = ()
    variants: tuple[str, ...] = ()
    generic: bool = False
    requires: Pattern | None = None
    literals: tuple[list[str] | None, ...] = ()  # per pattern: substrings one of which a match needs


# How much each field counts in an entry's searchable text (repeating a field raises its term counts).
FIELD_WEIGHTS = (("title", 2), ("patterns", 3), ("variants", 3), ("cause", 1), ("causes", 1), ("fix", 1))


def _pattern_words(p: str) -> str:
    """A regex as plain words: escapes, classes and quantifiers dropped, alternatives kept."""
    p = re.sub(r"\\[dswbDSWB][+*?]?|\[[^\]]*\][+*?]?|\{\d*,?\d*\}|\(\?[:!=]", " ", p)
    return re.sub(r"\\(.)", r"\1", p).replace("|", " ")


def _doc(e: Entry) -> list[str]:
    fields = {"title": e.title, "patterns": " ".join(_pattern_words(p.pattern) for p in e.patterns),
              "variants": " ".join(e.variants), "cause": e.cause,
              "causes": " ".join(c.cause for c in e.causes), "fix": " ".join(e.fix)}
    out: list[str] = []
    for name, weight in FIELD_WEIGHTS:
        out.extend(textmatch.terms(fields[name]) * weight)
    return out


@functools.lru_cache(maxsize=1)
def base() -> dict:
    from rubin.doctor.checks._common import data

    raw = data("knowledge.yaml")
    _validate(raw)
    return raw


class Pattern:
    """A knowledge-base regex, compiled on first use: most never run, because the substring prefilter
    in explain rules them out, and compiling 500 case-insensitive regexes up front costs a tenth of a second."""

    __slots__ = ("pattern", "_compiled", "_where")

    def __init__(self, pattern: str, where: str):
        self.pattern, self._compiled, self._where = pattern, None, where

    def search(self, text: str) -> re.Match | None:
        if self._compiled is None:
            try:
                self._compiled = re.compile(self.pattern, re.I | re.M)
            except re.error as exc:
                raise ValueError(f"{self._where}: pattern {self.pattern!r} is not a valid regex ({exc})") from None
        return self._compiled.search(text)


@functools.lru_cache(maxsize=1)
def entries() -> tuple[Entry, ...]:
    return tuple(Entry(e["id"], e["category"], e["title"], tuple(Pattern(p, f"knowledge.yaml entry {e['id']!r}") for p in e["patterns"]),
                       e["cause"],
                       tuple(e["fix"]), tuple(e.get("checks", ())), e["source"], e["confirm"],
                       tuple(Cause(**c) for c in e.get("causes", ())), tuple(e.get("variants", ())), e.get("generic", False),
                       Pattern(e["requires"], f"knowledge.yaml entry {e['id']!r}") if e.get("requires") else None,
                       tuple(textmatch.required_literals(p) for p in e["patterns"]))
                 for e in base()["entries"])


def by_id(entry_id: str) -> Entry:
    return _ids()[entry_id]


@functools.lru_cache(maxsize=1)
def _ids() -> dict[str, Entry]:
    return {e.id: e for e in entries()}


@functools.lru_cache(maxsize=1)
def index() -> textmatch.BM25:
    """BM25 over every entry's text, in the order of ``entries()``."""
    return textmatch.BM25([_doc(e) for e in entries()])


def collect_for(category: str) -> list[str]:
    collect = base()["collect"]
    return list(collect.get(category) or collect["general"])
