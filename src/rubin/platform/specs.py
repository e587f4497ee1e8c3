"""The GPU spec catalog: one row per GPU, loaded from ``gpu_specs.yaml`` (data, with a source per row).

Everything in rubin that needs a peak (MFU in the training loop, "% of spec" in ``rubin bench``,
memory sizes in ``rubin plan``) asks this module. The two rules that matter:

- An unknown or ambiguous GPU gets ``None`` and one warning. Never another GPU's numbers (one
  popular trainer reported 563% MFU by falling back to A100 peaks).
- Names are matched with word-bounded patterns so that the confusable pairs stay apart:
  GB300/B300, GB200/B200, L40S/L4, A100/A10, H200 NVL/H200, A100 40GB/80GB, SXM/PCIe/NVL.

All TFLOPS are dense (no 2:4 sparsity).
"""

from __future__ import annotations

import functools
import re
import warnings
from dataclasses import asdict, dataclass, field, fields
from importlib import resources

from rubin.errors import UsageError, bad_choice, did_you_mean, load_yaml_text

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4")

# What users and torch call the dtypes, mapped to the catalog's columns.
_DTYPE_ALIASES = {
    "float64": "fp64", "double": "fp64",
    "float32": "fp32", "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16", "half": "fp16",
    "float8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "e4m3": "fp8", "e5m2": "fp8",
    "nvfp4": "fp4", "float4": "fp4",
}

# A device cannot have more memory than its row says; allow for GB vs GiB rounding.
_MEMORY_SLACK = 1.10


@dataclass(frozen=True)
class GpuSpec:
    """One catalog row. TFLOPS are dense; ``None`` means not supported or not published."""

    key: str
    name: str
    arch: str
    compute_capability: str | None
    memory_gib: float | None
    memory_type: str | None
    memory_bw_tbs: float | None
    fp64: float | None
    fp32: float | None
    tf32: float | None
    bf16: float | None
    fp16: float | None
    fp8: float | None
    fp4: float | None
    nvlink_gen: int | None
    nvlink_bw_gbs: float | None
    pcie_gen: int | None
    tdp_w: float | None
    nvml_patterns: tuple[str, ...]
    source: str
    preliminary: bool = False
    form_factor: str | None = None
    aliases: tuple[str, ...] = ()
    uncertain: tuple[str, ...] = field(default_factory=tuple)

    @property
    def memory_bw_gbs(self) -> float | None:
        return None if self.memory_bw_tbs is None else self.memory_bw_tbs * 1000.0

    def matches(self, device_name: str) -> bool:
        return any(re.search(p, device_name, re.IGNORECASE) for p in self.nvml_patterns)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["nvml_patterns"] = list(self.nvml_patterns)
        d["aliases"] = list(self.aliases)
        d["uncertain"] = list(self.uncertain)
        return d


_FIELDS = {f.name for f in fields(GpuSpec)}
_TUPLES = ("nvml_patterns", "aliases", "uncertain")


def _row(raw: dict) -> GpuSpec:
    unknown = set(raw) - _FIELDS
    if unknown:  # a typo in the data file must not silently drop a figure
        raise ValueError(f"gpu_specs.yaml row {raw.get('key')!r} has unknown fields {sorted(unknown)}")
    data = dict(raw)
    for name in _TUPLES:
        data[name] = tuple(data.get(name) or ())
    cc = data.get("compute_capability")
    data["compute_capability"] = None if cc is None else str(cc)
    for name in DTYPES + ("memory_gib", "memory_bw_tbs", "nvlink_bw_gbs", "tdp_w"):
        if data.get(name) is not None:
            data[name] = float(data[name])
    return GpuSpec(**data)


@functools.lru_cache(maxsize=1)
def _load() -> tuple[GpuSpec, ...]:
    text = resources.files("rubin.platform").joinpath("gpu_specs.yaml").read_text()
    doc = load_yaml_text(text, "gpu_specs.yaml")  # a duplicated row key would otherwise silently win
    rows = tuple(_row(r) for r in doc["gpus"])
    keys = [r.key for r in rows]
    if len(set(keys)) != len(keys):
        raise ValueError("gpu_specs.yaml has duplicate keys")
    return rows


def catalog() -> list[GpuSpec]:
    """Every row, in file order."""
    return list(_load())


def _norm(text: str) -> str:
    return re.sub(r"[\s_\-]+", "", text.strip().upper())


def _warn(message: str) -> None:
    # One warning (not a log line as well): Python shows it once per call site, so a training loop
    # that asks every step does not flood its output.
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def match(
    device_name: str,
    *,
    total_memory_bytes: int | None = None,
    capability: tuple[int, int] | str | None = None,
    warn: bool = True,
) -> GpuSpec | None:
    """The catalog row for a name as NVML / ``torch.cuda.get_device_name`` reports it.

    ``total_memory_bytes`` and ``capability`` (when known) break ties and reject impossible
    matches. Unknown, ambiguous or contradictory: ``None`` and one warning, never a guess.
    """
    name = (device_name or "").strip()
    if not name:
        if warn:
            _warn("empty GPU name: no spec row, so no peak figures (MFU and % of spec are not reported)")
        return None
    hits = [s for s in _load() if s.matches(name)]
    cc = None
    if capability is not None:
        cc = capability if isinstance(capability, str) else f"{capability[0]}.{capability[1]}"
        hits = [s for s in hits if s.compute_capability in (None, cc)]
    if total_memory_bytes:
        gib = total_memory_bytes / 2**30
        hits = [s for s in hits if s.memory_gib is None or gib <= s.memory_gib * _MEMORY_SLACK]
        if len(hits) > 1:  # e.g. a name without the memory size: the closest size wins if unique
            best = min(abs((s.memory_gib or 0) - gib) for s in hits)
            hits = [s for s in hits if abs((s.memory_gib or 0) - gib) == best]
    if len(hits) == 1:
        return hits[0]
    if warn:
        if not hits:
            extra = f" (compute capability {cc})" if cc else ""
            _warn(
                f"GPU {name!r}{extra} is not in rubin's spec catalog: no peak figures, so MFU and "
                "% of spec are not reported; add a row with a source to rubin/platform/gpu_specs.yaml"
            )
        else:
            _warn(
                f"GPU {name!r} matches several catalog rows ({', '.join(s.key for s in hits)}): "
                "no peak figures; pass the memory size to tell them apart"
            )
    return None


def get(key_or_name: str) -> GpuSpec:
    """A row by key, alias or device name, for CLI flags such as ``--gpu H200``.

    Unknown or ambiguous -> ``UsageError`` with the choices and a did-you-mean.
    """
    want = _norm(str(key_or_name))
    rows = _load()
    for s in rows:
        if want == _norm(s.key) or want in (_norm(a) for a in s.aliases):
            return s
    # A prefix of several keys ("A100", "H100") is ambiguous: say which ones, don't pick.
    prefixed = [s for s in rows if _norm(s.key).startswith(want)] if want else []
    if len(prefixed) == 1:
        return prefixed[0]
    if len(prefixed) > 1:
        raise UsageError(
            f"gpu={key_or_name!r} is ambiguous: it could be {', '.join(s.key for s in prefixed)}; "
            "pass one of those keys"
        )
    hit = match(str(key_or_name), warn=False)
    if hit is not None:
        return hit
    keys = [s.key for s in rows]
    raise UsageError(
        f"gpu={key_or_name!r} is not in the spec catalog{did_you_mean(key_or_name, keys)}: "
        f"known GPUs are {', '.join(keys)}; run `rubin bench --list-gpus` for the table"
    )


def dtype_key(dtype: str) -> str:
    """Normalize a dtype name (``bfloat16``, ``torch.float16``, ``fp8_e4m3``...) to a catalog column."""
    d = str(dtype).lower().removeprefix("torch.")
    d = _DTYPE_ALIASES.get(d, d)
    if d not in DTYPES:
        raise bad_choice("dtype", dtype, DTYPES, "pass one of those")
    return d


def peak_tflops(spec: GpuSpec | None, dtype: str) -> float | None:
    """Dense peak TFLOPS of ``spec`` for ``dtype``; ``None`` for no spec or no published figure."""
    column = dtype_key(dtype)
    if spec is None:
        return None
    return getattr(spec, column)


def match_device(device) -> GpuSpec | None:
    """The row for a torch device (``None`` on CPU), using name, memory and capability."""
    from rubin.platform import device as dev

    if getattr(device, "type", None) != "cuda":
        return None
    return match(
        dev.device_name(device),
        total_memory_bytes=dev.total_memory_bytes(device),
        capability=dev.capability(device),
    )
