"""What each input of ``rubin report`` is: detected from its content, refused with one line if unknown."""

from __future__ import annotations

import json
from pathlib import Path

from rubin.errors import UsageError

KINDS = {  # kind field in the file -> report kind
    "rubin.bench.results": "bench",
    "rubin.compare": "compare",
    "doctor": "doctor",
    "checks": "doctor-checks",
    "rubin.plan.memory": "plan-memory",
    "rubin.plan.cost": "plan-cost",
    "rubin.plan.project": "plan-project",
    "rubin.plan.advise": "plan-advise",
    "rubin.verify.result": "verify",
    "rubin.qualify.certificate": "certificate",
}
ACCEPTED = ("a run dir (rubin train), rubin env --json, doctor --json, bench results, compare --json, "
            "plan memory|cost|project|advise --json, verify --json, a qualify certificate.json")


def detect(path) -> tuple[str, object]:
    """(kind, data) for one input: a run dir or a JSON file one of rubin's commands wrote."""
    p = Path(path)
    if p.is_dir():
        if (p / "config.yaml").is_file():
            return "run", p
        raise UsageError(f"INPUT {str(p)!r} is a directory but not a run dir (no config.yaml); accepted inputs: {ACCEPTED}")
    if not p.is_file():
        raise UsageError(f"INPUT {str(p)!r} does not exist; accepted inputs: {ACCEPTED}")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        why = "not UTF-8" if isinstance(exc, UnicodeDecodeError) else f"not JSON ({exc.msg}, line {exc.lineno})"
        raise UsageError(f"INPUT {str(p)!r} is {why}; accepted inputs: {ACCEPTED}") from None
    if not isinstance(data, dict):
        raise UsageError(f"INPUT {str(p)!r} holds a JSON {type(data).__name__}, not one of rubin's outputs; accepted inputs: {ACCEPTED}")
    kind = data.get("kind")
    if kind in KINDS:
        if kind == "rubin.bench.results":
            from rubin.bench.results import validate

            validate(data, source=str(p))
        return KINDS[kind], data
    if {"schema_version", "host", "torch", "gpu", "python"} <= set(data):
        return "env", data
    if kind is not None:
        raise UsageError(f"INPUT {str(p)!r} has kind={kind!r}, which rubin report does not read; accepted inputs: {ACCEPTED}")
    raise UsageError(f"INPUT {str(p)!r} is JSON but not one of rubin's outputs (no 'kind' field); accepted inputs: {ACCEPTED}")
