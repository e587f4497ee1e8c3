"""Measured throughput, from a ``rubin bench`` results file, a run's ``summary.json``, or by hand.

Files are read defensively, by keys: a file must carry a ``schema_version`` this reader knows,
and a number it can use; anything else is a one-line error, never a guess.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rubin.errors import UsageError, bad_value, did_you_mean, load_mapping

UNITS = ("samples", "tokens")
KNOWN_SCHEMA_MAJOR = 1
_RATE_KEYS = {"samples": ("samples_per_s",), "tokens": ("tokens_per_s",)}


@dataclass
class Throughput:
    value: float  # units per second, over all ``gpus``
    unit: str
    gpus: int
    gpu: str | None  # catalog key of the GPU it was measured on, when known
    source: str
    mfu: float | None = None
    tokens_per_sample: float | None = None

    @property
    def per_gpu(self) -> float:
        return self.value / self.gpus

    def in_unit(self, unit: str) -> float:
        """The rate in ``unit``, converting samples <-> tokens with tokens per sample."""
        if unit == self.unit:
            return self.value
        if not self.tokens_per_sample:
            raise UsageError(f"throughput is in {self.unit}/s but the work is in {unit}: pass --tokens-per-sample "
                             "to convert, or give --work in the same unit")
        return self.value * self.tokens_per_sample if unit == "tokens" else self.value / self.tokens_per_sample


def by_hand(value: float, unit: str, gpus: int = 1, gpu: str | None = None, mfu: float | None = None) -> Throughput:
    if not value > 0:
        raise bad_value("throughput", value, "a positive rate (units per second)", "e.g. --throughput 1000")
    if unit not in UNITS:
        raise bad_value("unit", unit, f"one of {', '.join(UNITS)}")
    return Throughput(float(value), unit, gpus, _gpu_key(gpu), "given by hand", mfu)


def _gpu_key(name: str | None) -> str | None:
    if not name:
        return None
    from rubin.platform import specs

    try:
        return specs.get(name).key
    except UsageError:
        spec = specs.match(name, warn=False)
        if spec is None:
            raise
        return spec.key


def _read(path: Path, what: str) -> dict:
    fix = "pass a rubin bench results file (--bench)" if what == "bench" else "pass a run's summary.json or its run directory"
    return load_mapping(path, what, fix)


def _check_schema(data: dict, path: Path, what: str, expected: str) -> None:
    version = data.get("schema_version")
    if version is None:
        raise UsageError(f"{what}={str(path)!r} has no schema_version: it is not {expected}; "
                         f"pass a file written by {expected}")
    try:
        major = int(str(version).split(".")[0])
    except ValueError:
        major = -1
    if major != KNOWN_SCHEMA_MAJOR:
        raise UsageError(f"{what}={str(path)!r} has schema_version={version!r}: this rubin reads version "
                         f"{KNOWN_SCHEMA_MAJOR}; rerun {expected} with this version")


def from_summary(path: str | Path) -> Throughput:
    """A run's summary.json (or its run directory); the GPU comes from env.json next to it."""
    p = Path(path)
    if p.is_dir():
        p = p / "summary.json"
    data = _read(p, "summary")
    if "schema_version" in data:
        _check_schema(data, p, "summary", "rubin train")
    if not any(k in data for k in ("samples_per_s", "tokens_per_s", "status")):
        raise UsageError(f"summary={str(p)!r} is not a rubin run summary (no samples_per_s, tokens_per_s or status); "
                         "pass <run dir>/summary.json")
    sps, tps = data.get("samples_per_s"), data.get("tokens_per_s")
    if not (sps or tps):
        raise UsageError(f"summary={str(p)!r} records no throughput (samples_per_s is empty); the run logged no steps")
    _refuse_cpu(str(data.get("device") or ""), f"summary={str(p)!r}")
    unit, value = ("tokens", tps) if tps else ("samples", sps)
    tokens_per_sample = tps / sps if (tps and sps) else None
    gpus = int(data.get("world_size") or 1)
    gpu = _gpu_from_env(p.parent / "env.json")
    return Throughput(float(value), unit, gpus, gpu, f"run summary {p}", data.get("mfu"), tokens_per_sample)


def on_cpu(device: str) -> bool:
    return device == "cpu" or device.startswith("cpu:")


def _refuse_cpu(device: str, what: str) -> None:
    """A CPU rate priced as a GPU's would be off by orders of magnitude, with exit 0: refuse it."""
    if on_cpu(device):
        raise UsageError(f"{what} was measured on the CPU, not a GPU, so it cannot price or project GPU time; "
                         "pass a run or bench from a GPU, or a GPU figure by hand (--throughput N --measured-gpu KEY)")


def _walk(obj, depth=0):
    if depth > 8:
        return
    if isinstance(obj, dict):
        yield obj
        for v in obj.values():
            yield from _walk(v, depth + 1)
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk(v, depth + 1)


def _gpu_name_in(data) -> str | None:
    """The first GPU name in an environment fingerprint ({"gpu": {"names": [...]}} or {"gpus": [...]})."""
    for d in _walk(data):
        for key in ("gpu_name", "device_name"):
            if isinstance(d.get(key), str):
                return d[key]
        for key in ("names", "gpus"):
            v = d.get(key)
            if isinstance(v, list) and v:
                if isinstance(v[0], str):
                    return v[0]
                if isinstance(v[0], dict) and isinstance(v[0].get("name"), str):
                    return v[0]["name"]
    return None


def _gpu_from_env(path: Path) -> str | None:
    if not path.exists():
        return None
    try:
        name = _gpu_name_in(json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError):
        return None
    if not name:
        return None
    from rubin.platform import specs

    spec = specs.match(name, warn=False)
    return spec.key if spec else None


def _bench_doc(path: str | Path) -> dict:
    """A ``rubin bench`` results file, checked by the bench package's own validator (one line on error)."""
    from rubin.bench import results

    p = Path(path)
    data = _read(p, "bench")
    return results.validate(data, source=f"bench={str(p)!r}")


def _spec_key_of(doc: dict) -> str | None:
    spec = doc.get("spec") or {}
    key = spec.get("key") or (doc.get("spec_match") or {}).get("key")
    if key:
        return key
    name = (doc.get("device") or {}).get("name")
    if name:
        from rubin.platform import specs

        hit = specs.match(name, warn=False)
        return hit.key if hit else None
    return None


def from_bench(path: str | Path, workload: str | None = None) -> Throughput:
    """The model-benchmark throughput in a ``rubin bench`` results file (``benchmarks.model.rows``)."""
    doc = _bench_doc(path)
    _refuse_cpu(str((doc.get("device") or {}).get("type") or ""), f"bench={str(path)!r}")
    entry = (doc.get("benchmarks") or {}).get("model") or {}
    rows = [r for r in entry.get("rows", []) if isinstance(r, dict) and r.get("samples_per_s")]
    if workload:
        names = sorted({str(r.get("workload")) for r in rows})
        rows = [r for r in rows if r.get("workload") == workload]
        if not rows and names:
            raise UsageError(f"bench-workload={workload!r} is not in {str(path)!r}{did_you_mean(workload, names)}: "
                             f"it has {', '.join(names)}")
    rows = [r for r in rows if _number(r["samples_per_s"], none_ok=True)]
    if not rows:
        extra = f" for workload {workload!r}" if workload else ""
        raise UsageError(f"bench={str(path)!r} has no model throughput{extra} (benchmarks.model.rows is empty); "
                         "run `rubin bench` with the model suite, or pass --throughput")
    if len({r.get("workload") for r in rows}) > 1 and not workload:
        names = ", ".join(sorted({str(r.get("workload")) for r in rows}))
        raise UsageError(f"bench={str(path)!r} measured several workloads ({names}); pick one with --bench-workload")
    row = rows[0]
    sps = _number(row["samples_per_s"])
    tps = _number(row.get("tokens_per_s"), none_ok=True)
    mfu = _number(row.get("mfu"), none_ok=True)
    value, unit = (tps, "tokens") if tps else (sps, "samples")
    label = f"bench {path} ({row.get('workload')}, {row.get('precision')})"
    return Throughput(value, unit, int(row.get("world_size") or 1), _spec_key_of(doc), label, mfu,
                      tps / sps if tps and sps else None)


def busbw_from_bench(path: str | Path) -> float | None:
    """All-reduce bus bandwidth (GB/s) at the largest message size measured, if the file has one."""
    doc = _bench_doc(path)
    rows = [r for r in ((doc.get("benchmarks") or {}).get("collectives") or {}).get("rows", [])
            if isinstance(r, dict) and r.get("op") == "all_reduce"]
    if not rows:
        return None
    big = max(rows, key=lambda r: r.get("bytes") or 0)
    return _number(big.get("busbw_gbps"), none_ok=True)


def _number(v, none_ok: bool = False) -> float | None:
    if isinstance(v, dict):  # a figure: {"median": ..., "min": ..., "max": ..., "ci95": [...]}
        v = v.get("median")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if none_ok and v is None:
        return None
    raise UsageError(f"figure {v!r} in the bench file is not a number; regenerate it with `rubin bench`")
