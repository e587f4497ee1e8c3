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
from collections import Counter
from dataclasses import asdict, dataclass, field

from rubin.doctor import corpus, deciders, knowledge, textmatch
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
EXAMPLE_WEIGHT = 1.0  # the best corpus example of an entry: its similarity (0..~1.5) times this adds to the score
MIN_EXAMPLE = 0.3  # an example less similar than this is no evidence
WORDS_ONLY = 0.7  # without a pattern or a decided fact, the best confidence stays below WEAK's 0.6 ...
OUTSIDE_DAMPING = 0.5  # an out-of-scope example closer than the best match's own: halve its confidence
PRIOR_MIN = 3  # a wrapper's confirmed cases needed before the most common one is put first ...
PRIOR_SHARE = 0.5  # ... and the share of them it must have (more than half)
PRIOR_LEAD = 0.1  # ... just above the wrapper: its confidence stays weak, the wrapper is the runner-up

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
    evidence: str = "pattern"  # "pattern": a regex matched; "fact": a decider read it from the message;
    #                            "prior": the usual cause of a wrapper message that matched;
    #                            "example": a corpus text reads alike; "words": the ranking alone
    fact: str = ""  # the deciding fact read from the text, printed with the cause and fix
    nearest: str = ""  # the url of the closest real-error example of this cause
    nearest_score: float = 0.0

    def to_dict(self) -> dict:
        e = self.entry
        return {"id": e.id, "category": e.category, "title": e.title, "score": round(self.score, 2),
                "confidence": round(self.confidence, 2), "evidence": self.evidence, "matched": self.matched,
                "fact": self.fact, "nearest": self.nearest,
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


def explain(text: str, findings: list[Finding] | None = None, top: int = TOP,
            examples: corpus.Examples | None = None) -> list[Match]:
    """The best ``top`` knowledge-base matches for ``text``, each with a confidence; [] when nothing matches.

    ``examples``: the real-error texts to learn from (default: the whole corpus; evaluation passes
    the corpus without the source it scores)."""
    problems = [f for f in (findings or []) if f.severity in ("warn", "error") and not f.failed]
    decisions = deciders.decide(text)
    text = textmatch.strip_boilerplate(text)
    query = textmatch.terms(text)
    ranked = knowledge.index().scores(query)
    nearest, outside = (corpus.examples() if examples is None else examples).best(query)
    lower = text.lower()
    out = []
    for entry, (bm25, hits) in zip(knowledge.entries(), ranked):
        rx, matched = _regex(entry, text, lower)
        near, example = nearest.get(entry.id, (0.0, None))
        decision = decisions.get(entry.id)
        words = sorted({h for h in hits if " " not in h and not h.startswith("#")})
        phrases = [h for h in hits if " " in h]
        worded = bm25 >= MIN_BM25 and len(words) >= MIN_WORDS and phrases
        if not (rx or worded or near >= MIN_EXAMPLE or (decision and decision.bonus)):
            continue
        score = rx / REGEX_SCALE + math.sqrt(bm25 / BM25_SCALE) + EXAMPLE_WEIGHT * near * (near >= MIN_EXAMPLE)
        if decision:
            score = (score + decision.bonus) * decision.factor
        if entry.generic:
            score *= GENERIC
        if entry.requires is not None:
            score *= CONTEXT if entry.requires.search(text) else MISSING_CONTEXT
        confirmed = [f for f in problems if f.check in entry.checks]
        if confirmed:
            score *= CONFIRM_BOOST
        evidence = ("pattern" if rx else "fact" if decision and decision.bonus
                    else "example" if near >= MIN_EXAMPLE else "words")
        fact = decision.fact if decision and decision.fact else _fact(matched, example if near >= MIN_EXAMPLE else None)
        out.append(Match(entry, score, matched or ["words: " + ", ".join(words[:8])], confirmed, evidence=evidence,
                         fact=fact, nearest=example.url if example else "", nearest_score=near))
    out.sort(key=lambda m: -m.score)
    if out and out[0].entry.generic:
        _usual_cause(out, examples if examples is not None else corpus.examples(), problems)
    _keep_specialised(out, top)
    _confidences(out, outside)
    return out[:top]


def _keep_specialised(out: list[Match], top: int) -> None:
    """An entry for one context (MIG) whose pattern matched while its context is not in the text ranks low;
    it still takes the last of the ``top`` places, so the one fact that would make it the answer is shown."""
    if top < 2:
        return
    for m in out[top:]:
        if m.entry.requires is not None and m.evidence == "pattern":
            m.score = out[top - 1].score + 0.01
            out.sort(key=lambda x: -x.score)
            return


def _usual_cause(out: list[Match], examples: corpus.Examples, problems: list[Finding]) -> None:
    """When only a wrapper message matched (NCCL's "unhandled system error", nvidia-smi's "couldn't
    communicate with the driver"), rank what that wrapper turned out to be in the corpus's confirmed cases:
    the cause of more than half of them goes first, as a weak candidate with the count as its reason, the
    wrapper stays the runner-up, and every other cause seen at least twice follows it."""
    wrapper = out[0]
    cases = [e.cause for e in examples.matching(wrapper.entry.id, lambda t: bool(_regex(wrapper.entry, t)[0]))
             if e.cause is not None]
    others = Counter(c for c in cases if c != wrapper.entry.id).most_common()
    if len(cases) < PRIOR_MIN:
        return
    for i, (cause, k) in enumerate(others):
        if i == 0 and k / len(cases) > PRIOR_SHARE:
            score = wrapper.score + PRIOR_LEAD
        elif k >= 2:
            score = wrapper.score - PRIOR_LEAD * (i + 1)
        else:
            break
        found = next((m for m in out if m.entry.id == cause), None)
        if found is None:
            entry = knowledge.by_id(cause)
            found = Match(entry, 0.0, [], [f for f in problems if f.check in entry.checks])
            out.append(found)
        if found.confirmed_by:  # this machine's facts back the usual cause as they back a matched one
            score *= CONFIRM_BOOST
        if found.score < score:
            found.score, found.evidence = score, "prior"
            found.matched = [f"the wrapper's usual causes: {k} of {len(cases)} confirmed cases"]
            found.fact = (f"the message is a wrapper ({wrapper.entry.title}); in {k} of {len(cases)} confirmed cases"
                          " that carried it, the cause was this one")
    out.sort(key=lambda m: -m.score)


def _fact(matched: list[str], example: corpus.Example | None) -> str:
    """What in the text decided the match, in words."""
    if matched:
        return f"the message says {matched[0]!r}"
    if example is not None:
        return f"it reads like a known case ({example.url}): {example.resolution}"
    return "only shared words (no pattern of this entry matches)"


def _confidences(matches: list[Match], outside: float = 0.0) -> None:
    """Softmax share among the candidates, times how much evidence the best one has at all; when an
    out-of-scope example is closer than any evidence the best match has beyond words, it is not sure."""
    if not matches:
        return
    best = matches[0].score
    weights = [math.exp((m.score - best) / TEMPERATURE) for m in matches]
    total = sum(weights)
    strength = 1 - math.exp(-best / STRENGTH)
    if matches[0].evidence not in ("pattern", "fact"):  # words or a resemblance alone: shown as candidates
        strength *= WORDS_ONLY
        if outside > matches[0].nearest_score:
            strength *= OUTSIDE_DAMPING
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
            "decide": [{"id": m.entry.id, "fact": m.entry.confirm, "why_unsure": _why_unsure(m, matches[0])}
                       for m in matches] if weak else [],
            "collect": collect}


def _why_unsure(m: Match, best: Match) -> str:
    """Why a candidate of a weak answer is not sure, in words."""
    if m.evidence == "pattern":
        return "a pattern matches, but another cause scores as well" if m is best else "ranks below the best match"
    if m.evidence == "fact":
        return "only the numbers in the message point here"
    if m.evidence == "prior":
        return "only how often the wrapper message turned out to be this cause"
    if m.evidence == "example":
        return "no pattern matches; the text only reads like a known case"
    return "no pattern matches; only some words are shared"


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
        if m.get("fact"):
            console.print(Text("   deciding fact: ", style="bold cyan") + Text(m["fact"]))
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
            console.print(Text(f"  - {d['id']}: ", style="bold") + Text(d["fact"]) +
                          Text(f"  (not sure: {d['why_unsure']})", style="dim"))
    if rep["collect"]:
        console.print(Text(f"Collect next ({rep['matches'][0]['category']}):", style="bold"))
        for c in rep["collect"]:
            console.print(f"  - {c}")
