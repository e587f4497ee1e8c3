"""The results file: one JSON document per ``rubin bench`` run, with a schema version.

```
{schema_version, kind: "rubin.bench.results", rubin_version, created, preset, suites, wall_s,
 env: {...fingerprint...}, device: {type, name, count, capability, total_memory_bytes},
 spec: {...catalog row...} | null, spec_match: {device_name, key, reason},
 benchmarks: {NAME: {status: ok|error|skipped, params, method, rows: [...], summary, skipped, notes, error, wall_s}}}
```
Field names others read: collective rows ``op, bytes, ranks, time_us, algbw_gbps, busbw_gbps``;
matmul rows ``dtype, m, n, k, tflops``; every figure ``median, min, max, ci95``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rubin.errors import UsageError, load_mapping

SCHEMA_VERSION = 1
KIND = "rubin.bench.results"


class Figure(BaseModel):
    model_config = ConfigDict(extra="allow")
    median: Optional[float]
    min: Optional[float]
    max: Optional[float]
    ci95: list[Optional[float]] = Field(min_length=2, max_length=2)  # [low, high]
    n: int = 0


class MatmulRow(BaseModel):
    model_config = ConfigDict(extra="allow")
    device: str
    dtype: str
    m: int
    n: int
    k: int
    tflops: Figure
    time_us: Figure
    pct_of_spec: Optional[float] = None


class CollectiveRow(BaseModel):
    model_config = ConfigDict(extra="allow")
    op: str
    bytes: int
    ranks: int
    time_us: Figure
    algbw_gbps: Figure
    busbw_gbps: Figure
    verified: bool


ROW_MODELS = {"matmul": MatmulRow, "collectives": CollectiveRow}


class BenchEntry(BaseModel):
    model_config = ConfigDict(extra="allow")
    status: Literal["ok", "error", "skipped"]
    params: dict[str, Any] = {}
    method: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
    skipped: list[dict[str, Any]] = []
    notes: list[str] = []
    error: Optional[str] = None
    wall_s: Optional[float] = None


class Results(BaseModel):
    model_config = ConfigDict(extra="allow")
    schema_version: int
    kind: Literal["rubin.bench.results"]
    rubin_version: str
    created: str
    preset: Literal["quick", "full"]
    suites: list[str]
    wall_s: Optional[float] = None
    env: dict[str, Any]
    device: dict[str, Any]
    spec: Optional[dict[str, Any]] = None
    spec_match: dict[str, Any] = {}
    benchmarks: dict[str, BenchEntry]


def validate(doc: dict, *, source: str = "results") -> dict:
    """Check a results document; raise UsageError (one line) when it is not one we can read."""
    if not isinstance(doc, dict):
        raise UsageError(f"{source}: not a rubin bench results file (expected a JSON object)")
    version = doc.get("schema_version")
    if doc.get("kind") != KIND:
        raise UsageError(f"{source}: kind={doc.get('kind')!r} is not valid: expected {KIND!r}; pass a file written by `rubin bench`")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise UsageError(f"{source}: schema_version={version!r} is not valid: this rubin reads up to {SCHEMA_VERSION}; upgrade rubin")
    try:
        Results.model_validate(doc)
        for name, entry in doc["benchmarks"].items():
            model = ROW_MODELS.get(name)
            if model:
                for row in entry.get("rows", []):
                    model.model_validate(row)
    except ValidationError as err:
        e = err.errors()[0]
        where = ".".join(str(p) for p in e["loc"])
        raise UsageError(f"{source}: {where} is not valid: {e['msg'].lower()}; regenerate it with `rubin bench`") from None
    _check_metrics(doc, source)
    return doc


def _check_metrics(doc: dict, source: str) -> None:
    """Every figure compare will read is a number with a [low, high] interval (a hand-edited file may not be)."""
    from rubin.bench import metrics

    try:
        figures = metrics.flatten(doc)
    except (KeyError, TypeError, AttributeError) as err:
        raise UsageError(f"{source}: a benchmark row lacks {err} or has the wrong shape; regenerate it with `rubin bench`") from None
    for key, m in figures.items():
        fig = m["figure"]
        ci = fig.get("ci95") if isinstance(fig, dict) else None
        ok = (isinstance(fig, dict) and _number(fig.get("median")) and isinstance(ci, list) and len(ci) == 2
              and all(v is None or _number(v) for v in ci))
        if not ok:
            shown = ci if isinstance(fig, dict) else fig
            raise UsageError(f"{source}: {key} figure is not valid (ci95={shown!r}): expected a median and ci95=[low, high]; "
                             "regenerate it with `rubin bench`")


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def save(doc: dict, path: str | Path) -> Path:
    from rubin.runs import write_json_atomic

    validate(doc, source=str(path))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, doc)
    return path


def load(path: str | Path) -> dict:
    """A results file, validated; missing, a directory, binary, garbled or foreign is one UsageError."""
    doc = load_mapping(path, "results file", "pass a file written by `rubin bench --out FILE`")
    return validate(doc, source=str(path))
