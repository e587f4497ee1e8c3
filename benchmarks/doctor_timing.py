"""Where ``rubin doctor``'s time goes: each check on the recorded H200's facts, and the live probe cold vs warm.

    python benchmarks/doctor_timing.py                 # both parts, 3 runs of each live variant
    python benchmarks/doctor_timing.py --runs 5 --deep

1. The checks, timed one by one on the facts recorded on a real H200 (tests/fixtures/doctor/h200_doctor.json),
   beside the probe times that machine recorded (its software probe, the torch subprocess, was 5.5 s
   of the 5.9 s doctor). The checks are pure functions of the facts, so this part is machine-independent.
2. Live on this machine, each run a fresh process: ``rubin doctor --json`` with an empty facts cache
   (cold: the torch subprocess runs) and with a filled one (warm), alternating, median and spread; with
   --deep, ``rubin doctor --deep --json`` too. Target on a GPU node: doctor <= 3 s, --deep <= 20 s.
Every figure is also printed as a JSON line. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "tests" / "fixtures" / "doctor" / "h200_doctor.json"


def emit(name: str, value, unit: str, target: str = "-", ok=None, **extra) -> None:
    print(json.dumps({"figure": name, "value": value, "unit": unit, "target": target, "ok": ok, **extra}), flush=True)


def checks_on_recorded() -> None:
    from rubin.doctor import registry
    from rubin.platform.facts import Facts

    doc = json.loads(RECORDED.read_text())
    facts = Facts.model_validate(doc["facts"])
    times = []
    for c in registry.all_checks():
        t0 = time.perf_counter()
        registry.run_check(c, facts)
        times.append((time.perf_counter() - t0, c.id))
    total = sum(t for t, _ in times)
    print(f"recorded H200: doctor {doc['wall_s']:.2f} s, probe {doc['probe_s']:.2f} s; per probe (s): "
          + ", ".join(f"{k} {v:.2f}" for k, v in sorted(doc["facts"]["probe_seconds"].items(), key=lambda kv: -kv[1])))
    print(f"its {len(times)} checks re-run here on its facts: {total * 1e3:.1f} ms in all; slowest: "
          + ", ".join(f"{cid} {t * 1e3:.1f} ms" for t, cid in sorted(times, reverse=True)[:5]))
    emit("doctor checks on the recorded H200 facts", round(total, 4), "s", "a small part of 3 s", total < 0.5)


def one(args: list[str], cache: str) -> tuple[float, float]:
    """(process wall, the report's own wall_s) of one ``rubin doctor`` run in a fresh process."""
    env = dict(os.environ, RUBIN_CACHE_DIR=cache, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "rubin", "doctor", "--json", *args], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    try:
        return wall, json.loads(p.stdout)["wall_s"]
    except (ValueError, KeyError):
        raise SystemExit(f"rubin doctor failed (exit {p.returncode}): {p.stderr.strip()[-500:]}") from None


def live(runs: int, deep: bool) -> None:
    variants = {"cold": [], "warm": []}
    with tempfile.TemporaryDirectory() as warm_dir:
        one([], warm_dir)  # fill the warm cache
        for r in range(runs):
            order = ("cold", "warm") if r % 2 == 0 else ("warm", "cold")
            for v in order:
                with tempfile.TemporaryDirectory() as cold_dir:
                    variants[v].append(one([], cold_dir if v == "cold" else warm_dir))
        if deep:
            variants["deep"] = [one(["--deep"], warm_dir) for _ in range(max(1, runs // 2))]
    med = statistics.median
    for v, rows in variants.items():
        walls, own = [w for w, _ in rows], [o for _, o in rows]
        target = 20.0 if v == "deep" else 3.0
        print(f"doctor {v:5s}: process {med(walls):.2f} s ({min(walls):.2f}-{max(walls):.2f}), "
              f"its own wall_s {med(own):.2f} s ({min(own):.2f}-{max(own):.2f}), {len(rows)} runs")
        emit(f"doctor {v} wall (this machine)", round(med(own), 3), "s", f"<= {target:g}", med(own) <= target,
             spread=[round(min(own), 3), round(max(own), 3)], process_s=round(med(walls), 3), runs=len(rows))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--deep", action="store_true", help="also time --deep")
    ap.add_argument("--recorded-only", action="store_true", help="only part 1")
    args = ap.parse_args(argv)
    checks_on_recorded()
    if not args.recorded_only:
        live(args.runs, args.deep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
