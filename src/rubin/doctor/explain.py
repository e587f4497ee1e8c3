"""``rubin doctor --explain``: map a pasted error or log to known causes, ranked, with live facts.

Two kinds of evidence are added up for every knowledge-base entry:

- its precise regexes, searched in the text as pasted: a match is strong evidence, and longer, more
  specific matches count more (several matching patterns add up with diminishing weight);
- a BM25 ranking (square-rooted, so it adds up slower than pattern evidence) of the normalised
  text (paths, addresses, PIDs, ranks, timestamps, hex and versions removed) against the entry's
  title, patterns, known variants, causes and fixes, so that a wording the regexes were not written
  for still finds its entry.

When live findings from this machine confirm an entry (one of its related checks found a problem)
its score is raised and the finding is shown next to it. The scores become confidences; a weak best
match shows its close rivals, the fact that tells them apart, and what to collect next.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field

from rubin.doctor import knowledge, textmatch
from rubin.doctor.findings import Finding
from rubin.doctor.knowledge import Entry

TOP = 3
CONFIRM_BOOST = 1.5
REGEX_SCALE = 12.0  # a 12-character pattern match weighs as much as ...
BM25_SCALE = 25.0  # ... a BM25 score of 25 (a few rare terms shared with the entry); BM25 counts as its square
#                    root, so a long traceback sharing many words cannot outvote a precise pattern
MIN_BM25 = 6.0  # without a pattern match, less word evidence than this is no match at all
MIN_WORDS = 2  # ... and so is a single shared word, or words without one shared two-word phrase
TEMPERATURE = 0.75  # softmax temperature over the combined scores (a lead of 1.5 is ~7:1)
STRENGTH = 1.0  # confidence also needs absolute evidence: 1 - exp(-score / STRENGTH)
WEAK = 0.6  # below this confidence the best match is shown as one candidate among three
GENERIC = 0.3  # a wrapper error counts a third, so that the specific cause it wraps ranks first
MISSING_CONTEXT = 0.3  # an entry whose required context (e.g. MIG) is absent from the text ...
CONTEXT = 1.5  # ... or present: then the specialised entry outranks the general one (MIG over any bad ordinal)

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
    confidence: float = 0.0
    evidence: str = "pattern"  # "pattern": a regex matched; "words": the ranking alone

    def to_dict(self) -> dict:
        e = self.entry
        return {"id": e.id, "category": e.category, "title": e.title, "score": round(self.score, 2),
                "confidence": round(self.confidence, 2), "evidence": self.evidence, "matched": self.matched,
                "cause": e.cause, "causes": [asdict(c) for c in e.causes], "confirm": e.confirm,
                "fix": list(e.fix), "checks": list(e.checks), "source": e.source,
                "confirmed_by": [f.to_dict() for f in self.confirmed_by]}


def _regex(entry: Entry, text: str, lower: str | None = None) -> tuple[float, list[str]]:
    lower = text.lower() if lower is None else lower
    lengths, matched = [], []
    for p, needs in zip(entry.patterns, entry.literals):
        if needs is not None and not any(n in lower for n in needs):
            continue  # a substring test (fast) proves the regex (slow, case-insensitive) cannot match
        m = p.search(text)
        if m and m.group(0).strip()[:120] not in matched:  # two patterns on the same words count once
            lengths.append(min(len(m.group(0)), 120))
            matched.append(m.group(0).strip()[:120])
    lengths.sort(reverse=True)
    return sum(n / (i + 1) for i, n in enumerate(lengths)), matched


def explain(text: str, findings: list[Finding] | None = None, top: int = TOP) -> list[Match]:
    """The best ``top`` knowledge-base matches for ``text``, each with a confidence; [] when nothing matches."""
    problems = [f for f in (findings or []) if f.severity in ("warn", "error") and not f.failed]
    ranked = knowledge.index().scores(textmatch.terms(text))
    lower = text.lower()
    out = []
    for entry, (bm25, hits) in zip(knowledge.entries(), ranked):
        rx, matched = _regex(entry, text, lower)
        words = sorted({h for h in hits if " " not in h and not h.startswith("#")})
        phrases = [h for h in hits if " " in h]
        if not rx and (bm25 < MIN_BM25 or len(words) < MIN_WORDS or not phrases):
            continue
        score = (rx / REGEX_SCALE + math.sqrt(bm25 / BM25_SCALE)) * refine(entry.id, text)
        if entry.generic:
            score *= GENERIC
        if entry.requires is not None:
            score *= CONTEXT if entry.requires.search(text) else MISSING_CONTEXT
        confirmed = [f for f in problems if f.check in entry.checks]
        if confirmed:
            score *= CONFIRM_BOOST
        evidence = "pattern" if rx else "words"
        out.append(Match(entry, score, matched or ["words: " + ", ".join(words[:8])], confirmed, evidence=evidence))
    out.sort(key=lambda m: -m.score)
    _confidences(out)
    return out[:top]


_KEYS = re.compile(r"(Missing|Unexpected) key\(s\) in state_dict:\s*\"([^\"]+)\"")
_WRAPPERS = ("module.", "_orig_mod.", "model.")


def refine(entry_id: str, text: str) -> float:
    """Precise checks a regex cannot express, as a score multiplier (1.0: no opinion).

    'Missing key(s)' next to 'Unexpected key(s)' is a wrapper prefix (DDP's module., compile's
    _orig_mod.) only when the two first keys differ by that prefix; otherwise the architectures differ."""
    if entry_id not in ("ckpt_module_prefix", "ckpt_missing_keys"):
        return 1.0
    keys = {kind: key for kind, key in _KEYS.findall(text)}
    if len(keys) < 2:
        return 1.0

    def bare(k: str) -> str:
        for w in _WRAPPERS:
            k = k.removeprefix(w)
        return k

    missing, unexpected = keys["Missing"], keys["Unexpected"]
    prefix_only = missing != unexpected and bare(missing) == bare(unexpected)
    return (2.0 if prefix_only else 0.3) if entry_id == "ckpt_module_prefix" else (0.3 if prefix_only else 2.0)


def _confidences(matches: list[Match]) -> None:
    """Softmax share among the candidates, times how much evidence the best one has at all."""
    if not matches:
        return
    best = matches[0].score
    weights = [math.exp((m.score - best) / TEMPERATURE) for m in matches]
    total = sum(weights)
    strength = 1 - math.exp(-best / STRENGTH)
    for m, w in zip(matches, weights):
        m.confidence = w / total * strength


def report(text: str, findings: list[Finding] | None = None, *, facts_used: bool = False) -> dict:
    from rubin.doctor.report import SCHEMA_VERSION

    matches = explain(text, findings)
    best = matches[0] if matches else None
    weak = best is not None and best.confidence < WEAK
    if best is None:
        collect = WHAT_TO_COLLECT
    elif weak:
        collect = knowledge.collect_for(best.entry.category)
    else:
        collect = []
    return {"schema_version": SCHEMA_VERSION, "kind": "explain", "input_chars": len(text), "facts_used": facts_used,
            "matches": [m.to_dict() for m in matches], "matched": bool(matches),
            "confidence": round(best.confidence, 2) if best else 0.0, "weak": weak,
            "decide": [{"id": m.entry.id, "fact": m.entry.confirm} for m in matches] if weak else [],
            "collect": collect}


def render(console, rep: dict) -> None:
    from rich.text import Text

    if not rep["matches"]:
        console.print(Text("No known cause matches this text.", style="bold yellow"))
        console.print("rubin's knowledge base does not recognize it, so it will not guess. Collect this and search or ask:")
        for c in rep["collect"]:
            console.print(f"  - {c}")
        return
    if rep["weak"]:
        console.print(Text(f"Weak match (confidence {rep['confidence']:.0%}): these are the closest known causes.",
                           style="bold yellow"))
    for i, m in enumerate(rep["matches"], 1):
        head = Text(f"{i}. {m['title']}", style="bold") + Text(
            f"  [{m['id']}, {m['category']}, confidence {m['confidence']:.0%}]", style="dim")
        console.print(head)
        console.print(Text("   matched: ", style="bold") + Text(" | ".join(m["matched"])))
        console.print(Text("   cause: ", style="bold") + Text(m["cause"]))
        for n, c in enumerate(m["causes"], 1):
            console.print(Text(f"     {n}) ", style="bold") + Text(c["cause"]) + Text(f"  (tell: {c['tell']})", style="dim"))
        for f in m["fix"]:
            console.print(Text("   fix: ", style="bold green") + Text(f))
        for c in m["confirmed_by"]:
            console.print(Text("   on this machine: ", style="bold magenta") + Text(f"{c['title']} ({c['evidence']})"))
        console.print(Text(f"   source: {m['source']}", style="dim"))
        if not rep["weak"] and i == 1 and len(rep["matches"]) > 1:
            console.print(Text("also possible:", style="dim"))
    if rep["decide"]:
        console.print(Text("What tells them apart:", style="bold"))
        for d in rep["decide"]:
            console.print(Text(f"  - {d['id']}: ", style="bold") + Text(d["fact"]))
    if rep["collect"]:
        console.print(Text(f"Collect next ({rep['matches'][0]['category']}):", style="bold"))
        for c in rep["collect"]:
            console.print(f"  - {c}")
