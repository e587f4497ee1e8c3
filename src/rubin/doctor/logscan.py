"""Whole logs for ``--explain``: a torchrun log of interleaved ranks, a Slurm ``.err`` file, a ``dmesg`` excerpt.

The first error of a distributed job is usually buried: one rank fails, and then every other rank
times out in its collective and prints a long traceback, and torchrun adds its ChildFailedError frame.
So the log is split per rank, cut into error blocks (a trigger line and the traceback lines after it),
each block is explained once (identical blocks from different ranks share one answer), and the root
cause is the earliest block whose cause is not a consequence of another failure (a watchdog timeout, a
wrapper error). Problems of unrelated kinds are reported as such, so a second fault is not lost.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rubin.doctor import explain, knowledge, textmatch

LOG_LINES = 40  # from this many lines on, a paste is read as a log
BLOCK_LINES = 30  # an error block ends after this many lines of its rank
# What a rank's line starts with: torchrun --tee / log_line_prefix ([rank3]:, [default3]:), srun --label (3:).
_RANK = re.compile(r"^\s*(?:\[(?:rank|default|RANK )(\d+)\]:?|(\d{1,4}): )\s?")
_TASK = re.compile(r"\btask (\d+)\b|\blocal_rank:? (\d+)|\[Rank (\d+)\]")  # a rank named inside the message
_GPU = re.compile(r"PCI:([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})")
_TRIGGER = re.compile(
    r"Traceback \(most recent call last\)|\b\w*(Error|Exception)\b:|NCCL WARN|NVRM: Xid|fallen off the bus|"
    r"Out of memory: Killed|oom-kill|\bKilled\b|CANCELLED AT|DUE TO TIME LIMIT|srun: error|slurmstepd: error|"
    r"\bFAILED\b|Watchdog caught|ChildFailedError|exitcode\s*:\s*-?\d|Signal \d+ \(SIG\w+\) received", re.I)
_CONTINUES = re.compile(r"^\s+|^\w*(Error|Exception)\b|^During handling|^The above exception|^Root Cause|^\[\d+\]:$|^=+$")
# Causes that follow from another failure rather than start one: the root is the earliest problem not among them.
CONSEQUENCES = {"nccl_timeout", "elastic_agent_sigterm", "nccl_remote_error", "slurm_preempted"}
# Categories one fault explains: a GPU that faulted (Xid) explains the CUDA and NCCL errors after it.
RELATED = {frozenset({"xid_ecc", "cuda_runtime"}), frozenset({"xid_ecc", "nccl"}), frozenset({"memory", "torchrun"}),
           frozenset({"nccl", "torchrun"}), frozenset({"cuda_runtime", "nccl"})}


@dataclass
class Problem:
    match: explain.Match
    line: int  # 1-based line of the block's first line in the log
    ranks: list[int] = field(default_factory=list)
    gpus: list[str] = field(default_factory=list)
    blocks: int = 1

    @property
    def secondary(self) -> bool:
        return self.match.entry.generic or self.match.entry.id in CONSEQUENCES

    def to_dict(self) -> dict:
        return {"id": self.match.entry.id, "title": self.match.entry.title, "category": self.match.entry.category,
                "line": self.line, "ranks": self.ranks, "gpus": self.gpus, "blocks": self.blocks,
                "secondary": self.secondary, "confidence": round(self.match.confidence, 2), "fact": self.match.fact,
                "cause": self.match.entry.cause, "fix": list(self.match.entry.fix), "confirm": self.match.entry.confirm}


def is_log(text: str) -> bool:
    return text.count("\n") + 1 >= LOG_LINES


def _rank_of(line: str) -> tuple[int | None, str]:
    m = _RANK.match(line)
    if not m:
        return None, line
    return int(m.group(1) or m.group(2)), line[m.end():]


def blocks(text: str) -> list[tuple[int, int | None, str]]:
    """(first line, rank, text) of every error block, in the order the log printed their first lines."""
    streams: dict[int | None, list[tuple[int, str]]] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        rank, line = _rank_of(raw)
        streams.setdefault(rank, []).append((n, line))
    out = []
    for rank, lines in streams.items():
        i = 0
        while i < len(lines):
            n, line = lines[i]
            if not _TRIGGER.search(line):
                i += 1
                continue
            j = i + 1
            while j < len(lines) and j - i < BLOCK_LINES and (_CONTINUES.search(lines[j][1]) or _TRIGGER.search(lines[j][1])):
                j += 1
            out.append((n, rank, "\n".join(line for _, line in lines[i:j])))
            i = j
    return sorted(out, key=lambda b: b[0])


def scan(text: str) -> list[Problem]:
    """The problems in a log, one per cause, in the order of their first block."""
    answers: dict[str, explain.Match | None] = {}  # identical blocks (other ranks, other times) are explained once
    problems: dict[str, Problem] = {}
    for n, rank, block in blocks(text):
        key = " ".join(textmatch.words(block))
        if key not in answers:
            found = explain.explain(block, top=1)
            answers[key] = found[0] if found and (found[0].evidence in ("pattern", "fact", "prior")) else None
        match = answers[key]
        if match is None:
            continue
        rank = rank if rank is not None else _named_rank(block)
        p = problems.get(match.entry.id)
        if p is None:
            p = problems[match.entry.id] = Problem(match, n)
        else:
            p.blocks += 1
        if rank is not None and rank not in p.ranks:
            p.ranks.append(rank)
        for gpu in _GPU.findall(block):
            if gpu not in p.gpus:
                p.gpus.append(gpu)
    return sorted(problems.values(), key=lambda p: p.line)


def _named_rank(block: str) -> int | None:
    m = _TASK.search(block)
    return int(next(g for g in m.groups() if g is not None)) if m else None


def root_and_unrelated(problems: list[Problem]) -> tuple[Problem | None, list[Problem]]:
    """The root cause (the earliest problem that is not a consequence), and the problems it cannot explain."""
    if not problems:
        return None, []
    first = [p for p in problems if not p.secondary]
    root = first[0] if first else problems[0]
    cat = root.match.entry.category
    unrelated = [p for p in first[1:] if p.match.entry.category != cat
                 and frozenset({cat, p.match.entry.category}) not in RELATED]
    return root, unrelated


def report(text: str) -> dict:
    from rubin.doctor.report import SCHEMA_VERSION

    problems = scan(text)
    root, unrelated = root_and_unrelated(problems)
    return {"schema_version": SCHEMA_VERSION, "kind": "explain_log", "lines": text.count("\n") + 1,
            "root": root.to_dict() if root else None, "unrelated": [p.to_dict() for p in unrelated],
            "problems": [p.to_dict() for p in problems], "two_problems": bool(unrelated),
            "collect": [] if root else knowledge.collect_for("general")}


def _where(p: dict) -> str:
    if p["ranks"]:
        return ("rank " if len(p["ranks"]) == 1 else "ranks ") + ", ".join(str(r) for r in sorted(p["ranks"]))
    if p["gpus"]:
        return "GPU " + ", ".join(p["gpus"])
    return "no rank named"


def render(console, rep: dict) -> None:
    from rich.text import Text

    root = rep["root"]
    if root is None:
        console.print(Text(f"No known cause found in these {rep['lines']} lines.", style="bold yellow"))
        for c in rep["collect"]:
            console.print(f"  - {c}")
        return
    console.print(Text(f"Root cause: {root['title']}", style="bold") +
                  Text(f"  [{root['id']}, {_where(root)}, first at line {root['line']}]", style="dim"))
    console.print(Text("   cause: ", style="bold") + Text(root["cause"]))
    console.print(Text("   deciding fact: ", style="bold cyan") + Text(root["fact"]))
    for f in root["fix"]:
        console.print(Text("   fix: ", style="bold green") + Text(f))
    for p in rep["unrelated"]:
        console.print(Text(f"A second, unrelated problem: {p['title']}", style="bold yellow") +
                      Text(f"  [{p['id']}, {_where(p)}, line {p['line']}]", style="dim"))
        console.print(Text("   deciding fact: ", style="bold cyan") + Text(p["fact"]))
        for f in p["fix"][:2]:
            console.print(Text("   fix: ", style="bold green") + Text(f))
    others = [p for p in rep["problems"] if p["id"] != root["id"] and p not in rep["unrelated"]]
    if others:
        console.print(Text("Follows from it (not the cause):", style="dim"))
        for p in others:
            console.print(Text(f"  - {p['title']} ({_where(p)}, {p['blocks']} block(s), from line {p['line']})", style="dim"))
