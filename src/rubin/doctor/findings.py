"""A finding: what a check concluded, with the evidence, the cause and the fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

SEVERITIES = ("ok", "info", "warn", "error")
RANK = {s: i for i, s in enumerate(SEVERITIES)}


@dataclass
class Finding:
    id: str  # stable: "<check id>" or "<check id>.<variant>" (e.g. "xid.79")
    check: str
    severity: str
    title: str
    evidence: str = ""  # the exact fact(s), with their source
    cause: str = ""
    fix: list[str] = field(default_factory=list)  # commands to run, or steps
    gpu: int | None = None
    failed: bool = False  # the check itself raised: this is rubin's problem, not the machine's
    skipped: str = ""  # why an "ok" check did not apply here (a GPU check on a machine without one)

    def __post_init__(self):
        if self.severity not in RANK:
            raise ValueError(f"severity={self.severity!r} is not one of {SEVERITIES}")

    def to_dict(self) -> dict:
        return asdict(self)


def worst(findings: list[Finding]) -> str:
    return max((f.severity for f in findings), key=RANK.__getitem__, default="ok")
