"""The figures of a GPU check run (scripts/gpu-smoke.sh, scripts/gpu-check.sh), as they are measured and at the end.

    python scripts/gpu_check.py derive FILE            # figure lines from a step's document (doctor, pytest, matmul)
    python scripts/gpu_check.py train FILE --label L [--compiled] [--ac] [--fp8] [--fused] [--mfu]
    python scripts/gpu_check.py gather SCRATCH OUT --run smoke|full --limit S --planned S --total S

A figure is one JSON line, ``{"figure", "value", "unit", "target", "kind", "ok"}``, printed (and
flushed) the moment it is known. ``kind`` says what a miss means:

- ``check``: a correctness check (a resume's digest, compile that traced, tests that passed); a miss
  fails the run;
- ``gap``: a target that is an ambition (MFU 45%, fp8 1.25x, no capped matmul shape, doctor in 3 s);
  a miss is reported as a gap, never a failure;
- ``info``: a figure without a bar (a person compares).

``gather`` writes the run's only outputs into OUT: a compact ``summary.json`` and ``figures.txt``
(each figure's last line wins: benchmarks print a figure after every round). Exit 0 when every step
ran (or was skipped for a reason: no driver, no wheels, no time left for an extra) and every check held,
3 when not, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

KEYS = ("figure", "value", "unit", "target", "kind", "ok", "source")


def figure(name: str, value, unit: str, target: str, kind: str, ok: bool | None) -> dict:
    return {"figure": name, "value": value, "unit": unit, "target": target, "kind": kind, "ok": ok}


def emit(rows: list[dict]) -> None:
    for row in rows:
        print(json.dumps(row), flush=True)


def _load(path: Path) -> dict:
    """The last JSON document in PATH (a step's stdout may hold figure lines before it)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return {}
    try:
        doc = json.loads(text)
        return doc if isinstance(doc, dict) else {}
    except ValueError:
        pass
    start = text.rfind("\n{\n")  # an indented document after other lines
    for chunk in ([text[start + 1:]] if start >= 0 else []) + text.splitlines()[::-1]:
        try:
            doc = json.loads(chunk)
        except ValueError:
            continue
        if isinstance(doc, dict) and "figure" not in doc:
            return doc
    return {}


# -- figures derived from a step's document -------------------------------------------------------
def derive(path: Path) -> list[dict]:
    name = path.name
    if name in ("doctor.json", "doctor-deep.json"):
        doc, limit = _load(path), (3.0 if name == "doctor.json" else 20.0)
        if "wall_s" in doc:
            wall = round(doc["wall_s"], 2)
            return [figure(f"{name[:-5]} wall", wall, "s", f"<= {limit:g}", "gap", wall <= limit)]
        return []
    if name.startswith("pytest"):
        text = path.read_text(errors="replace") if path.is_file() else ""
        counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)\b", text)}
        if not counts:
            return []
        bad = counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0)
        label = name.rsplit(".", 1)[0]
        # a skip is information: the 2-GPU NCCL test skips on one GPU by design
        return [figure(f"{label} failed", bad, "tests", "0", "check", bad == 0),
                figure(f"{label} passed", counts.get("passed", 0), "tests", "-", "info", None),
                figure(f"{label} skipped", counts.get("skipped", 0), "tests", "-", "info", None)]
    if name == "bench-matmul.txt":  # the step's text; its document is written beside it
        return _matmul(_load(path.with_name("bench-matmul.json")))
    return []


def _matmul(doc: dict) -> list[dict]:
    bench = doc.get("benchmarks", {}).get("matmul", {})
    rows = []
    for dev, per_dtype in bench.get("summary", {}).items():
        for dtype, s in per_dtype.items():
            rows.append(figure(f"matmul {dtype} MAMF {dev}", round(s["mamf_tflops"], 1), "TFLOP/s",
                               f"spec {s.get('spec_tflops')}", "info", None))
            head = s.get("headline")
            for kind in ("burst", "sustained") if head else ():
                shape = "x".join(map(str, head["shape"]))
                rows.append(figure(f"matmul {dtype} {shape} {kind} {dev}", round(head[kind]["tflops"], 1), "TFLOP/s",
                                   "-", "info", None))
    if bench.get("rows"):
        capped = [r for r in bench["rows"] if (r.get("nvml") or {}).get("capped")]
        rows.append(figure("matmul shapes measured while capped", len(capped), "shapes", "0 (else read their clocks)",
                           "gap", not capped))
    return rows


# -- figures from a rubin train summary -------------------------------------------------------------
def train(doc: dict, label: str, *, compiled: bool = False, ac: bool = False, fp8: bool = False, fused: bool = False,
          mfu: bool = False, compile_target: float | None = None) -> list[dict]:
    if not doc:
        return [figure(f"{label}: rubin train completed", False, "", "true", "check", False)]
    done = doc.get("status") == "completed"
    loss = doc.get("final_loss")
    finite = isinstance(loss, (int, float)) and math.isfinite(loss)
    rows = [figure(f"{label}: rubin train completed, finite loss", done and finite, "", "true", "check", done and finite)]
    if doc.get("tokens_per_s"):
        rows.append(figure(f"{label} tokens/s", round(doc["tokens_per_s"]), "tok/s", "-", "info", None))
    if mfu:
        m = doc.get("mfu")
        rows.append(figure(f"{label} MFU", None if m is None else round(m, 4), "", ">= 0.45", "gap",
                           None if m is None else m >= 0.45))
    c = doc.get("compile") or {}
    if compiled:
        traced = bool(c.get("frames")) and c.get("fallback") is None
        what = " with activation checkpointing" if ac else ""
        rows.append(figure(f"{label}: compile traced the blocks{what} (frames, no fallback)",
                           f"{c.get('frames')} frames, {c.get('graphs')} graphs, fallback {c.get('fallback')}", "",
                           "frames >= 1, fallback none", "check", traced))
        if compile_target is not None and c.get("compile_s") is not None:
            rows.append(figure(f"{label} compile_s", c["compile_s"], "s", f"<= {compile_target:g}", "gap",
                               c["compile_s"] <= compile_target))
    if fused:
        rows.append(figure(f"{label}: fused loss on", doc.get("fused_loss_impl"), "", "rubin or liger", "check",
                           bool(doc.get("fused_loss"))))
    if fp8:
        n = doc.get("fp8_layers", 0)
        rows.append(figure(f"{label}: fp8 Linears converted", n, "layers", "> 0", "check", n > 0))
    if doc.get("peak_mem_bytes") and str(doc.get("device", "")).startswith("cuda"):
        rows.append(figure(f"{label} peak memory", round(doc["peak_mem_bytes"] / 1e9, 2), "GB", "-", "info", None))
    return rows


# -- the end of a run: summary.json and figures.txt ---------------------------------------------------
def steps(scratch: Path) -> list[dict]:
    rows = []
    path = scratch / "steps.tsv"
    for line in (path.read_text().splitlines() if path.is_file() else []):
        name, status, secs, budget, limit, *note = line.split("\t") + [""]
        row = {"name": name, "status": status, "seconds": int(secs), "budget_s": int(budget), "limit_s": int(limit),
               "note": note[0]}
        if status in ("failed", "timeout"):  # the scratch folder goes with the machine: keep the cause
            err = scratch / f"{name}.stderr"
            tail = [ln for ln in err.read_text(errors="replace").splitlines() if ln.strip()][-3:] if err.is_file() else []
            row["stderr_tail"] = [ln[:300] for ln in tail]
        rows.append(row)
    return rows


def figures(scratch: Path) -> list[dict]:
    """Every figure line the run printed, the last of each name, in the order first seen."""
    found: dict[str, dict] = {}
    path = scratch / "figures.jsonl"
    for line in (path.read_text(errors="replace").splitlines() if path.is_file() else []):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict) or "figure" not in row:
            continue
        row.setdefault("kind", "info" if row.get("ok") is None else "gap")
        found[row["figure"]] = {k: row.get(k) for k in KEYS if k in row}
    return list(found.values())


def summarize(scratch: Path, run: str, limit: int, planned: int, total: int) -> dict:
    table, figs = steps(scratch), figures(scratch)
    figs.append(figure(f"gpu-{run} total", total, "s", f"<= {limit}", "gap", total <= limit))
    failed = [s["name"] for s in table if s["status"] in ("failed", "timeout")]
    checks = [f["figure"] for f in figs if f["kind"] == "check" and f["ok"] is not True]
    gaps = [f["figure"] for f in figs if f["kind"] == "gap" and f["ok"] is False]
    return {"kind": "rubin.gpu_check", "run": run, "limit_s": limit, "planned_s": planned,
            "reserve_s": limit - planned, "total_s": total, "exit": 3 if failed or checks else 0,
            "failed_steps": failed, "failed_checks": checks, "gaps": gaps,
            "skipped": {s["name"]: s["note"] for s in table if s["status"] == "skipped"}, "steps": table, "figures": figs}


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def figures_text(summary: dict) -> str:
    marks = {"check": {True: "ok  ", False: "FAIL", None: "FAIL"}, "gap": {True: "ok  ", False: "GAP ", None: "    "}}
    lines = [f"rubin gpu-{summary['run']}: exit {summary['exit']}, {summary['total_s']} s of {summary['limit_s']} s "
             f"({summary['planned_s']} s planned)"]
    for f in summary["figures"]:
        mark = marks.get(f["kind"], {}).get(f["ok"], "    ")
        unit = f" {f['unit']}" if f.get("unit") else ""
        lines.append(f"{mark} {f['figure']}: {_fmt(f['value'])}{unit} (target {f['target']})")
    lines.append("steps: " + ", ".join(f"{s['name']} {s['status']} {s['seconds']}/{s['budget_s']}s" for s in summary["steps"]))
    for key, title in (("failed_steps", "failed steps"), ("failed_checks", "failed checks"), ("gaps", "gaps to targets")):
        if summary[key]:
            lines.append(f"{title}: " + "; ".join(summary[key]))
    return "\n".join(lines) + "\n"


def gather(scratch: Path, out: Path, run: str, limit: int, planned: int, total: int) -> int:
    summary = summarize(scratch, run, limit, planned, total)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    text = figures_text(summary)
    (out / "figures.txt").write_text(text)
    sys.stdout.write(text)
    return summary["exit"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("derive")
    d.add_argument("file", type=Path)
    t = sub.add_parser("train")
    t.add_argument("file", type=Path)
    t.add_argument("--label", required=True)
    for flag in ("compiled", "ac", "fp8", "fused", "mfu"):
        t.add_argument(f"--{flag}", action="store_true")
    t.add_argument("--compile-target", type=float, default=None)
    g = sub.add_parser("gather")
    g.add_argument("scratch", type=Path)
    g.add_argument("out", type=Path)
    g.add_argument("--run", choices=["smoke", "full"], required=True)
    for flag in ("limit", "planned", "total"):
        g.add_argument(f"--{flag}", type=int, required=True)
    a = ap.parse_args(argv)
    if a.cmd == "derive":
        emit(derive(a.file))
        return 0
    if a.cmd == "train":
        emit(train(_load(a.file), a.label, compiled=a.compiled, ac=a.ac, fp8=a.fp8, fused=a.fused, mfu=a.mfu,
                   compile_target=a.compile_target))
        return 0
    if not (a.scratch / "steps.tsv").is_file():
        print(f"gpu_check: error: {a.scratch} has no steps.tsv; pass the scratch folder of a GPU check run", file=sys.stderr)
        return 2
    return gather(a.scratch, a.out, a.run, a.limit, a.planned, a.total)


if __name__ == "__main__":
    sys.exit(main())
