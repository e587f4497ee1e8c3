"""``rubin doctor --explain``: map a pasted error or log to known causes, ranked, with live facts.

Each knowledge-base entry scores the length of the text its patterns match (longer, more specific
matches win; several matching patterns add up with diminishing weight). When live findings from
this machine confirm an entry (one of its related checks found a problem) its score is raised and
the finding is shown next to it: "libcuda.so.1 not found" plus "no driver loaded here" points to
the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rubin.doctor.findings import Finding
from rubin.doctor.knowledge import Entry, entries

CONFIRM_BOOST = 1.5
TOP = 3

WHAT_TO_COLLECT = [
    "the full error, including the first lines above the traceback (the first failing rank's log in multi-GPU runs)",
    "`rubin env` (versions, GPUs, driver, NCCL, scheduler) and `rubin doctor --json`",
    "`nvidia-smi` and `sudo dmesg | grep -i -e xid -e nvrm | tail -50`",
    "for NCCL problems: the same run with NCCL_DEBUG=INFO TORCH_DISTRIBUTED_DEBUG=DETAIL",
    "for CUDA errors: the same run with CUDA_LAUNCH_BLOCKING=1",
]


@dataclass
class Match:
    entry: Entry
    score: float
    matched: list[str]
    confirmed_by: list[Finding] = field(default_factory=list)

    def to_dict(self) -> dict:
        e = self.entry
        return {"id": e.id, "category": e.category, "title": e.title, "score": round(self.score, 2),
                "matched": self.matched, "cause": e.cause, "fix": list(e.fix), "checks": list(e.checks),
                "source": e.source, "confirmed_by": [f.to_dict() for f in self.confirmed_by]}


def _score(entry: Entry, text: str) -> tuple[float, list[str]]:
    lengths, matched = [], []
    for p in entry.patterns:
        m = p.search(text)
        if m:
            lengths.append(min(len(m.group(0)), 120))
            matched.append(m.group(0).strip()[:120])
    lengths.sort(reverse=True)
    return sum(n / (i + 1) for i, n in enumerate(lengths)), matched


def explain(text: str, findings: list[Finding] | None = None, top: int = TOP) -> list[Match]:
    """The best ``top`` knowledge-base matches for ``text``; [] when nothing matches."""
    problems = [f for f in (findings or []) if f.severity in ("warn", "error") and not f.failed]
    out = []
    for entry in entries():
        score, matched = _score(entry, text)
        if not score:
            continue
        confirmed = [f for f in problems if f.check in entry.checks]
        if confirmed:
            score *= CONFIRM_BOOST
        out.append(Match(entry, score, matched, confirmed))
    out.sort(key=lambda m: -m.score)
    return out[:top]


def report(text: str, findings: list[Finding] | None = None, *, facts_used: bool = False) -> dict:
    from rubin.doctor.report import SCHEMA_VERSION

    matches = explain(text, findings)
    return {"schema_version": SCHEMA_VERSION, "kind": "explain", "input_chars": len(text), "facts_used": facts_used,
            "matches": [m.to_dict() for m in matches], "matched": bool(matches),
            "collect": [] if matches else WHAT_TO_COLLECT}
