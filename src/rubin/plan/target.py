"""The GPU a plan targets, from the one spec catalog (``rubin.platform.specs``) or a size in GiB."""

from __future__ import annotations

from rubin.errors import UsageError, bad_value
from rubin.plan import GIB


def gpu_spec(name: str):
    """The catalog row for ``name`` (UsageError with did-you-mean when unknown)."""
    from rubin.platform import specs

    return specs.get(name)


def gpu_memory(name: str | None, memory_gib: float | None) -> tuple[str | None, float | None, list[str]]:
    """(label, bytes, notes) for ``--gpu NAME`` or ``--gpu-memory-gib X``."""
    notes: list[str] = []
    if memory_gib is not None:
        if not (memory_gib > 0 and memory_gib != float("inf")):
            raise bad_value("gpu-memory-gib", memory_gib, "a positive, finite size in GiB", "e.g. --gpu-memory-gib 80")
        return (name or f"{memory_gib:g} GiB GPU"), memory_gib * GIB, notes
    if name is None:
        return None, None, notes
    spec = gpu_spec(name)
    if spec.memory_gib is None:
        raise UsageError(f"gpu={name!r} has no memory size in the spec catalog; pass --gpu-memory-gib")
    notes.append(f"{spec.key}: {spec.memory_gib:g} GiB nominal from the spec catalog; the device reports a little "
                 "less, which --usable-fraction covers")
    if spec.preliminary:
        notes.append(f"{spec.key} figures are preliminary (the vendor says so)")
    return spec.key, spec.memory_gib * GIB, notes
