"""The one list of checks. A check is a pure function ``Facts -> Finding | list[Finding] | None``.

``None`` or ``[]`` means "nothing wrong" and becomes one ``ok`` finding; a check that raises
becomes a failed finding (severity warn, ``failed=True``) instead of crashing the report. A check
registered with ``gpu=True`` that finds nothing on a machine without an NVIDIA GPU is ``ok`` with
``skipped`` set: "NVIDIA driver loaded: ok" on a CPU box would read as a GPU that passed.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from rubin.doctor.findings import Finding

_MODULES = ("system", "driver", "software", "gpu", "interconnect", "environment", "xid")


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    concept: str
    fn: Callable
    gpu: bool = False  # it only means something where there is an NVIDIA GPU


_CHECKS: dict[str, Check] = {}


def check(id: str, title: str, *, gpu: bool = False):
    """Register a check; its concept is the module it lives in."""

    def deco(fn):
        if id in _CHECKS:
            raise RuntimeError(f"duplicate check id {id!r}")
        concept = fn.__module__.rsplit(".", 1)[-1]
        _CHECKS[id] = Check(id, title, concept, fn, gpu)
        return fn

    return deco


def all_checks() -> list[Check]:
    for mod in _MODULES:
        importlib.import_module(f"rubin.doctor.checks.{mod}")
    return list(_CHECKS.values())


def run_check(c: Check, facts) -> list[Finding]:
    try:
        out = c.fn(facts)
    except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
        return [Finding(id=c.id, check=c.id, severity="warn", failed=True,
                        title=f"{c.title}: the check itself failed ({type(exc).__name__}: {exc})",
                        cause="a bug in rubin or a fact shaped in a way the check did not expect",
                        fix=["rerun with --debug and report it, with `rubin env --json`"])]
    if out is None:
        out = []
    elif isinstance(out, Finding):
        out = [out]
    if not out:
        from rubin.doctor.checks._common import nvidia_present

        skipped = "no NVIDIA GPU on this machine" if c.gpu and not nvidia_present(facts) else ""
        return [Finding(id=c.id, check=c.id, severity="ok", title=c.title, skipped=skipped)]
    return list(out)


def run_checks(facts, only: list[str] | None = None) -> list[Finding]:
    findings = []
    for c in all_checks():
        if only and not any(c.id == o or c.id.startswith(o.rstrip(".") + ".") or c.concept == o for o in only):
            continue
        findings.extend(run_check(c, facts))
    return findings
