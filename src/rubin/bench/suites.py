"""The suite table and the runner that turns benchmarks into one results document.

``rubin bench SUITE`` runs one entry of ``SUITES``; ``all`` runs them in order (matmul first, so
the model benchmark can report MFU against this node's own measured ceiling).
"""

from __future__ import annotations

import datetime as _dt
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rubin import __version__
from rubin.bench import results

# name -> (module, defaults fn, run fn), in the order ``all`` runs them.
SUITES: dict[str, tuple[str, str, str]] = {
    "matmul": ("rubin.bench.matmul", "defaults", "run"),
    "membw": ("rubin.bench.memory", "membw_defaults", "membw_run"),
    "h2d": ("rubin.bench.memory", "h2d_defaults", "h2d_run"),
    "launch": ("rubin.bench.kernel_launch", "defaults", "run"),
    "collectives": ("rubin.bench.collectives", "defaults", "run"),
    "io": ("rubin.bench.storage", "defaults", "run"),
    "model": ("rubin.bench.model", "defaults", "run"),
}


@dataclass
class Context:
    """What every benchmark gets: the devices to measure, their spec rows and a progress callback."""

    device: object
    devices: list
    gpu_count: int
    specs: dict = field(default_factory=dict)  # str(device) -> GpuSpec | None
    workdir: Path = Path(".")
    quick: bool = True
    progress: Callable[[str], None] = lambda msg: None
    matmul_summary: dict = field(default_factory=dict)
    spec_warnings: list = field(default_factory=list)

    def spec_for(self, device):
        return self.specs.get(str(device))

    def mamf_tflops(self, precision: str) -> float | None:
        """The measured ceiling of this run's matmul benchmark for a training precision (first device)."""
        dtype = {"fp32": "tf32" if self.gpu_count else "fp32"}.get(precision, precision)
        per_device = self.matmul_summary.get(str(self.device)) or {}
        entry = per_device.get(dtype) or (per_device.get("fp32") if dtype == "tf32" else None)
        return entry.get("mamf_tflops") if entry else None


def make_context(want: str = "auto", *, quick: bool, workdir: Path, progress=None) -> Context:
    import warnings

    from rubin.platform import device as dev
    from rubin.platform import specs

    primary = dev.pick_device(0, want)
    if primary.type == "cuda":
        import torch

        devices = [torch.device("cuda", i) for i in range(dev.device_count())]
    else:
        devices = [primary]
    table = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for d in devices:
            table[str(d)] = specs.match_device(d)
    ctx = Context(device=primary, devices=devices, gpu_count=len(devices) if primary.type == "cuda" else 0,
                  specs=table, workdir=Path(workdir), quick=quick, progress=progress or (lambda msg: None))
    ctx.spec_warnings = sorted({str(w.message) for w in caught})
    return ctx


def _device_info(ctx) -> dict:
    from rubin.platform import device as dev

    d = ctx.device
    return {"type": d.type, "name": dev.device_name(d), "count": max(ctx.gpu_count, 1),
            "capability": ".".join(map(str, dev.capability(d))) if dev.capability(d) else None,
            "total_memory_bytes": dev.total_memory_bytes(d)}


def resolve_params(name: str, ctx, overrides: dict | None = None) -> dict:
    import importlib

    module, dflt, _ = SUITES[name]
    params = getattr(importlib.import_module(module), dflt)(ctx.quick, ctx)
    for key, value in (overrides or {}).get(name, {}).items():
        if key not in params:
            from rubin.errors import bad_choice

            raise bad_choice(f"--set {name}.{key}: key", key, params)
        if isinstance(params[key], dict) and isinstance(value, dict):
            for sub, v in value.items():
                if sub not in params[key]:
                    from rubin.errors import bad_choice

                    raise bad_choice(f"--set {name}.{key}.{sub}: key", sub, params[key])
                check_param(f"{name}.{key}.{sub}", sub, params[key][sub], v)
            params[key] = {**params[key], **value}  # a nested override changes only the keys it names
        else:
            check_param(f"{name}.{key}", key, params[key], value)
            params[key] = value
    return params


# Parameters that may be 0 (no warmup, no worker processes, no cache flush); every other count must be >= 1.
ZERO_OK = {"warmup", "num_workers", "flush_bytes"}


def check_param(name: str, key: str, default, value) -> None:
    """A --set value has the default's type and a sane range, so a typo fails before anything runs."""
    import math

    from rubin.errors import bad_value

    def fail(allowed: str):
        raise bad_value(f"--set {name}", value, allowed, f"e.g. --set {name}={_example(default)}")

    if default is None:  # free-form (a directory): a string or null
        if value is not None and not isinstance(value, str):
            fail("a string")
    elif isinstance(default, bool):
        if not isinstance(value, bool):
            fail("true or false")
    elif isinstance(default, int):
        low = 0 if key in ZERO_OK else 1
        if not isinstance(value, int) or isinstance(value, bool) or value < low or value > 2**50:
            fail(f"an integer >= {low}")
    elif isinstance(default, float):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
            fail("a finite number > 0")
    elif isinstance(default, str):
        if not isinstance(value, str) or not value:
            fail("a non-empty string")
    elif isinstance(default, list):
        if not isinstance(value, list) or (default and not value):
            fail("a non-empty list like the default")
        if default:
            for item in value:
                check_param(name, key, default[0], item)


def _example(default) -> str:
    if isinstance(default, list):
        return "[" + ", ".join(_example(d) for d in default[:2]) + "]"
    return str(default).lower() if isinstance(default, bool) else str(default)


def run_one(name: str, ctx, params: dict) -> dict:
    """One benchmark as a results entry. A benchmark that raises becomes an ``error`` entry."""
    import importlib

    from rubin.bench.load import Meter
    from rubin.errors import UsageError

    module, _, fn = SUITES[name]
    t0 = time.perf_counter()
    meter = Meter()
    try:
        out = getattr(importlib.import_module(module), fn)(params, ctx)
        status = "error" if out.get("error") else out.pop("status", "ok")
    except UsageError:
        raise
    except Exception as err:  # noqa: BLE001 - one failed benchmark must not lose the others
        out, status = {"error": f"{type(err).__name__}: {err}"}, "error"
    entry = {"status": status, "params": params, "wall_s": time.perf_counter() - t0, **out, "load": meter.read()}
    if name == "matmul" and status == "ok":
        ctx.matmul_summary = out.get("summary", {})
    return entry


def run(names: list[str], ctx, overrides: dict | None = None, on_done=None) -> dict:
    """Run ``names`` and return the results document (not yet written)."""
    from rubin.platform.fingerprint import fingerprint

    t0 = time.perf_counter()
    spec = ctx.spec_for(ctx.device)
    doc = {
        "schema_version": results.SCHEMA_VERSION, "kind": results.KIND, "rubin_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "preset": "quick" if ctx.quick else "full", "suites": list(names), "wall_s": None,
        "env": fingerprint(), "device": _device_info(ctx),
        "spec": spec.to_dict() if spec else None,
        "spec_match": {"device_name": _device_info(ctx)["name"], "key": spec.key if spec else None,
                       "reason": None if spec else ("CPU: no GPU spec" if ctx.gpu_count == 0 else
                                                    "; ".join(ctx.spec_warnings) or "not in catalog")},
        "benchmarks": {},
    }
    params = {name: resolve_params(name, ctx, overrides) for name in names}  # bad --set fails before any run
    for name in names:
        entry = run_one(name, ctx, params[name])
        doc["benchmarks"][name] = entry
        if on_done:
            on_done(name, entry)
    doc["wall_s"] = time.perf_counter() - t0
    from rubin.bench.load import quality

    doc["quality"] = quality(doc)
    return doc
