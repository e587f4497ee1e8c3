"""How long ``rubin doctor --explain`` takes on a 200-line log, as a user runs it.

    python benchmarks/explain_speed.py [--trials 11]

Wall clock of whole processes (``rubin doctor --explain - --no-facts`` and with the machine's facts),
side by side with ``rubin doctor --help`` (interpreter start plus the CLI import) as the baseline, in
alternating trials; prints median, min and max of each and the median ratio to the baseline. Also the
in-process time of ``explain.report`` alone. The log is 200 lines built from the real error texts in
benchmarks/data/explain/train.yaml between ordinary training-progress lines, with one error at the end.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

DATA = Path(__file__).resolve().parent / "data" / "explain" / "train.yaml"


def log_200_lines() -> str:
    rows = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    lines: list[str] = []
    i = 0
    while len(lines) < 185:
        lines.append(f"[2025-06-01 12:{i // 60:02d}:{i % 60:02d}] step {i * 10} loss {2.5 - i * 0.001:.4f} lr 3.0e-04 "
                     f"grad_norm 0.91 samples/s 812.4")
        if i % 20 == 7:  # a warning or an earlier, unrelated message now and then
            lines.extend(rows[i % len(rows)]["text"].strip().splitlines()[:2])
        i += 1
    error = next(r["text"] for r in rows if r["expect"] == "nccl_timeout")
    lines.extend(error.strip().splitlines())
    lines = lines[-200:] if len(lines) > 200 else lines + ["..."] * (200 - len(lines))
    return "\n".join(lines) + "\n"


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(argv: list[str], stdin: str | None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one process; CPU time shows the cost on a loaded machine too."""
    c0, t0 = _children_cpu(), time.perf_counter()
    out = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=300)
    elapsed, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if out.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({out.returncode}): {out.stderr[-500:]}")
    return elapsed, cpu


def summary(name: str, xs: list[float], base: list[float] | None = None) -> str:
    line = f"{name:<34} median {statistics.median(xs):6.3f} s  min {min(xs):6.3f}  max {max(xs):6.3f}  n={len(xs)}"
    if base:
        line += f"  ratio to baseline {statistics.median(xs) / statistics.median(base):.2f}"
    return line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=11)
    args = p.parse_args(argv)
    log = log_200_lines()
    assert log.count("\n") == 200
    rubin = [sys.executable, "-m", "rubin"]
    cases = {
        "baseline: rubin doctor --help": (rubin + ["doctor", "--help"], None),
        "explain 200 lines, --no-facts": (rubin + ["doctor", "--explain", "-", "--no-facts"], log),
        "explain 200 lines, with facts": (rubin + ["doctor", "--explain", "-"], log),
    }
    times: dict[str, list[float]] = {k: [] for k in cases}
    cpus: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(args.trials):  # alternate the cases so load on the machine hits them alike
        for name, (cmd, stdin) in cases.items():
            wall, cpu = timed(cmd, stdin)
            times[name].append(wall)
            cpus[name].append(cpu)
    base = times["baseline: rubin doctor --help"]
    for name, xs in times.items():
        print(summary(name, xs, None if xs is base else base))
    for name, xs in cpus.items():
        print(summary(f"CPU {name}", xs))

    from rubin.doctor import explain, knowledge

    knowledge.index()  # loaded once per process; the CLI numbers above include it
    inproc = []
    for _ in range(args.trials):
        t0 = time.perf_counter()
        rep = explain.report(log)
        inproc.append(time.perf_counter() - t0)
    print(summary("explain.report() in process", inproc))
    print(f"top match: {rep['matches'][0]['id']} (confidence {rep['confidence']:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
