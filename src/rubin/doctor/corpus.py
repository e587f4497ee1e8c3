"""The real-error corpus (data/corpus/*.jsonl): error texts from public threads with the cause the thread confirmed.

One JSON object per line: text (as quoted in the thread), source (the repository or site: the unit
left out in evaluation), url, cause (a knowledge-base id, ``new:<slug>`` until it has one, or null for
a text out of rubin's scope) and resolution (the confirmed cause or fix, one sentence).

``--explain`` learns from these texts as nearest examples (``Examples``), and
``benchmarks/explain_loso.py`` scores it leaving one source out at a time. ``aliases.yaml`` maps the
collectors' ``new:<slug>`` labels to the ids the knowledge base gave them, so their files stay as written.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from importlib import resources

from rubin.doctor import textmatch

FIELDS = ("text", "source", "url", "cause", "resolution")


@dataclass(frozen=True)
class Example:
    text: str
    source: str
    url: str
    cause: str | None  # a knowledge id, or None: out of scope
    resolution: str
    file: str = ""


def _dir():
    return resources.files("rubin.doctor") / "data" / "corpus"


@functools.lru_cache(maxsize=1)
def aliases() -> dict[str, str]:
    import yaml

    path = _dir() / "aliases.yaml"
    return dict(yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.is_file() else {}


def parse(name: str, lines: list[str], ids: set[str]) -> tuple[list[Example], list[str]]:
    """The examples of one corpus file, and one problem line per row that cannot be used."""
    out, problems, alias = [], [], aliases()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"corpus/{name} line {n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{where}: not JSON ({exc.msg})")
            continue
        if not isinstance(row, dict) or set(FIELDS) - set(row):
            problems.append(f"{where}: needs the fields {', '.join(FIELDS)}")
            continue
        cause = row["cause"]
        if isinstance(cause, str) and cause.startswith("new:"):
            cause = alias.get(cause[4:], cause)
        if cause is not None and cause not in ids:
            problems.append(f"{where}: cause {row['cause']!r} is not a knowledge id (add it to aliases.yaml)")
            continue
        if not str(row["text"]).strip():
            problems.append(f"{where}: empty text")
            continue
        out.append(Example(row["text"], row["source"], row["url"], cause, row["resolution"], name))
    return out, problems


@functools.lru_cache(maxsize=1)
def _load() -> tuple[tuple[Example, ...], tuple[str, ...]]:
    from rubin.doctor import knowledge

    ids = {e.id for e in knowledge.entries()}
    examples, problems, seen = [], [], set()
    for path in sorted(_dir().iterdir(), key=lambda p: p.name):
        if path.name.endswith(".jsonl"):
            ex, pr = parse(path.name, path.read_text(encoding="utf-8").splitlines(), ids)
            problems += pr
            for e in ex:  # two collectors may quote the same text: it counts once
                key = " ".join(e.text.split())
                if key not in seen:
                    seen.add(key)
                    examples.append(e)
    return tuple(examples), tuple(problems)


def load() -> tuple[Example, ...]:
    """Every usable example (a row that cannot be used is skipped here and named by ``problems()``)."""
    return _load()[0]


def problems() -> tuple[str, ...]:
    return _load()[1]


class Examples:
    """BM25 over corpus texts, answered per cause: the best-matching example of each cause.

    A pasted error that reads like a text users already hit finds that text's cause even when no
    pattern matches; an out-of-scope example that matches best says the paste is probably not ours."""

    def __init__(self, examples: tuple[Example, ...] | list[Example], terms: list[list[str]] | None = None):
        self.examples = tuple(examples)
        if terms is None:
            terms = [textmatch.terms(textmatch.strip_boilerplate(e.text)) for e in self.examples]
        self.terms = terms
        self.bm25 = textmatch.BM25(terms)
        self._own: dict[int, float] = {}
        self._left_out: frozenset[int] = frozenset()
        self._matching: dict[str, list[int]] = {}  # shared with the views: a text's match does not depend on them

    def without(self, source: str) -> Examples:
        """The same examples with one source left out: nothing of it is learned, not even its word counts."""
        view = object.__new__(Examples)
        view.examples, view.terms, view._own, view._matching = self.examples, self.terms, {}, self._matching
        held = frozenset(i for i, e in enumerate(self.examples) if e.source == source)
        view._left_out = held | self._left_out
        view.bm25 = self.bm25.without(held)
        return view

    def matching(self, key: str, test) -> list[Example]:
        """The examples (not left out) whose text passes ``test``; cached under ``key``."""
        hits = self._matching.get(key)
        if hits is None:
            hits = self._matching[key] = [i for i, e in enumerate(self.examples) if test(e.text)]
        return [self.examples[i] for i in hits if i not in self._left_out]

    def _weight(self, i: int) -> float:
        got = self._own.get(i)
        if got is None:
            got = self._own[i] = self.bm25.weight(self.terms[i]) or 1.0
        return got

    def best(self, query_terms: list[str]) -> tuple[dict[str | None, tuple[float, Example]], float]:
        """cause -> (similarity, example) of its best example, and the best similarity of an out-of-scope
        example. Similarity is the BM25 score over the geometric mean of the query's and the example's own
        weights (the idf of their terms): sharing the rare words counts, and a short paste contained in a
        long example whose telling line it lacks (or the reverse) is only half as close."""
        whole = self.bm25.weight(query_terms)
        out: dict[str | None, tuple[float, Example]] = {}
        if not whole:
            return out, 0.0
        for i, score in self.bm25.top(query_terms):
            ex, sim = self.examples[i], score / math.sqrt(whole * self._weight(i))
            if sim > out.get(ex.cause, (0.0, None))[0]:
                out[ex.cause] = (sim, ex)
        return out, out.pop(None, (0.0, None))[0]


@functools.lru_cache(maxsize=1)
def examples() -> Examples:
    """The whole corpus as examples (what the CLI uses). Tokenising 800 texts takes most of a second, so the
    terms are cached on disk, keyed by the corpus and the tokeniser's source: a changed file rebuilds them."""
    rows = load()
    return Examples(rows, _cached_terms(rows))


def _cached_terms(rows: tuple[Example, ...]) -> list[list[str]]:
    import hashlib
    import os
    import tempfile
    from pathlib import Path

    key = hashlib.sha256(Path(textmatch.__file__).read_bytes())
    for e in rows:
        key.update(e.text.encode("utf-8", "replace") + b"\0")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rubin" / f"explain-{key.hexdigest()[:16]}.json"
    try:
        terms = json.loads(cache.read_text(encoding="utf-8"))  # JSON, not pickle: a cache file is not code
        if isinstance(terms, list) and len(terms) == len(rows):
            return terms
    except (OSError, ValueError):
        pass
    terms = [textmatch.terms(textmatch.strip_boilerplate(e.text)) for e in rows]
    try:  # best effort: a read-only home only costs the second next time
        cache.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(terms, f)
        os.replace(tmp, cache)  # atomic: a concurrent reader sees the old file or the whole new one
    except OSError:
        pass
    return terms
