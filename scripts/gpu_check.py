"""Gather a scripts/gpu-check.sh run into OUT/summary.json and a short OUT/figures.txt.

    python scripts/gpu_check.py OUT [--budget 415] [--total SECONDS]

Figures come from two places: JSON lines a step printed (``{"figure": NAME, "value": V, "unit": U,
"target": T, "ok": bool}``, any step's stdout), and the JSON files of steps that print a document
(doctor, bench matmul, the training summary), read here. Each figure keeps the target it is held
against; ``ok`` is None where the target is a comparison made by a person (a figure with no fixed bar).
Exit 0 when every step ran and every figure with a target met it, 3 when something missed, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path


def steps(out: Path) -> list[dict]:
    rows = []
    for line in (out / "steps.tsv").read_text().splitlines():
        name, status, secs, budget, *note = line.split("\t") + [""]
        rows.append({"name": name, "status": status, "seconds": int(secs), "budget_s": int(budget), "note": note[0]})
    return rows


def figure(name: str, value, unit: str, target: str, ok: bool | None, source: str) -> dict:
    return {"figure": name, "value": value, "unit": unit, "target": target, "ok": ok, "source": source}


def printed_figures(out: Path, names: list[str]) -> list[dict]:
    """The JSON figure lines on each step's stdout."""
    found = []
    for name in names:
        path = out / name
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            if not line.startswith('{"figure"'):
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue
            row.setdefault("source", name)
            found.append(row)
    return found


def _load(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def derived_figures(out: Path) -> list[dict]:
    rows = []
    for name, limit in (("doctor.json", 3.0), ("doctor-deep.json", 20.0)):
        doc = _load(out / name)
        if "wall_s" in doc:
            rows.append(figure(f"{name[:-5]} wall", round(doc["wall_s"], 2), "s", f"<= {limit:g}", doc["wall_s"] <= limit, name))
    text = (out / "pytest-gpu.txt").read_text(errors="replace") if (out / "pytest-gpu.txt").is_file() else ""
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)\b", text)}
    if counts:
        bad = counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0)
        rows.append(figure("gpu tests failed", bad, "tests", "0", bad == 0, "pytest-gpu.txt"))
        rows.append(figure("gpu tests skipped", counts.get("skipped", 0), "tests", "0", counts.get("skipped", 0) == 0,
                           "pytest-gpu.txt"))
        rows.append(figure("gpu tests passed", counts.get("passed", 0), "tests", "-", None, "pytest-gpu.txt"))
    bench = _load(out / "bench-matmul.json").get("benchmarks", {}).get("matmul", {})
    for dev, per_dtype in bench.get("summary", {}).items():
        for dtype, s in per_dtype.items():
            rows.append(figure(f"matmul {dtype} MAMF {dev}", round(s["mamf_tflops"], 1), "TFLOP/s",
                               f"spec {s.get('spec_tflops')}", None, "bench-matmul.json"))
            head = s.get("headline")
            if head:
                shape = "x".join(map(str, head["shape"]))
                for kind in ("burst", "sustained"):
                    k = head[kind]
                    rows.append(figure(f"matmul {dtype} {shape} {kind} {dev}", round(k["tflops"], 1), "TFLOP/s",
                                       "within 3% of the plain loop (bench-vs-plain)", None, "bench-matmul.json"))
    capped = [r for r in bench.get("rows", []) if (r.get("nvml") or {}).get("capped")]
    if bench.get("rows"):
        rows.append(figure("matmul shapes measured while capped", len(capped), "shapes", "0 (else read their clocks)",
                           not capped, "bench-matmul.json"))
    train = _load(out / "gpt124m.json")
    if train:
        rows.append(figure("GPT-124M tokens/s", train.get("tokens_per_s"), "tok/s", "-", None, "gpt124m.json"))
        mfu = train.get("mfu")
        rows.append(figure("GPT-124M MFU", mfu, "", ">= 0.45", None if mfu is None else mfu >= 0.45, "gpt124m.json"))
    prof = _load(out / "profile.json")
    if prof:  # the bottleneck rubin profile names, held against what the GPU-speed figures show (a person compares)
        v = prof.get("verdict") or {}
        rows.append(figure("GPT-124M profile verdict", v.get("id", "none"), "", "matches the speed figures", None,
                           "profile.json"))
    return rows


def summarize(out: Path, budget: int, total: int | None) -> dict:
    table = steps(out)
    total = total if total is not None else sum(s["seconds"] for s in table)
    figs = printed_figures(out, [s["name"] for s in table]) + derived_figures(out)
    figs.append(figure("gpu-check total", total, "s", "<= 420", total <= 420, "steps.tsv"))
    return {"kind": "rubin.gpu_check", "budget_s": budget, "total_s": total,
            "budgets_sum_s": sum(s["budget_s"] for s in table),
            "steps": table, "skipped": [s["name"] for s in table if s["status"] == "skipped"],
            "failed": [s["name"] for s in table if s["status"] in ("failed", "timeout")], "figures": figs}


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def figures_text(summary: dict) -> str:
    lines = []
    for f in summary["figures"]:
        mark = {True: "ok  ", False: "MISS", None: "    "}[f["ok"]]
        lines.append(f"{mark} {f['figure']}: {_fmt(f['value'])} {f['unit']}  (target {f['target']})".rstrip())
    lines.append("steps: " + ", ".join(f"{s['name']} {s['status']} {s['seconds']}/{s['budget_s']}s" for s in summary["steps"]))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--budget", type=int, default=415)
    ap.add_argument("--total", type=int, default=None, help="seconds from the first step (default: the steps' sum)")
    args = ap.parse_args(argv)
    if not (args.out / "steps.tsv").is_file():
        print(f"gpu_check: error: {args.out} has no steps.tsv; pass the OUT folder of a scripts/gpu-check.sh run", file=sys.stderr)
        return 2
    summary = summarize(args.out, args.budget, args.total)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    text = figures_text(summary)
    (args.out / "figures.txt").write_text(text)
    sys.stdout.write(text)
    missed = summary["failed"] or any(f["ok"] is False for f in summary["figures"])
    return 3 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
