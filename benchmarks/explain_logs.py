"""Time ``rubin doctor --explain`` on whole logs: the 2,000-line torchrun log of 8 ranks, the Slurm .err, dmesg.

    python benchmarks/explain_logs.py [--runs 7]

Each log is read by the log path (split per rank, error blocks, root cause) and, side by side in the
same run, by the plain single-paste path (the whole log as one text), the baseline. Prints the median
and spread (min-max) of wall-clock seconds per log, and the ratio log path / baseline. The budget is
1 s for 2,000 lines; this script reports, it does not assert.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

FIX = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "doctor"
LOGS = ["explain_torchrun_8ranks.log", "explain_slurm.err", "explain_dmesg.txt"]


def _time(fn, text: str, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn(text)
        out.append(time.perf_counter() - t0)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=7)
    args = p.parse_args(argv)
    from rubin.doctor import corpus, explain, knowledge, logscan

    t0 = time.perf_counter()
    knowledge.index()
    corpus.examples()
    print(f"loading the knowledge base and the corpus index: {time.perf_counter() - t0:.2f} s (once per process)")
    print(f"{'log':<30} {'lines':>5}  {'log path s (median, min-max)':<30} {'one paste s':<24} ratio")
    for name in LOGS:
        text = (FIX / name).read_text()
        logscan.report(text)  # first use compiles the patterns it needs
        scan = _time(logscan.report, text, args.runs)
        paste = _time(explain.explain, text, args.runs)
        ms, mp = statistics.median(scan), statistics.median(paste)
        print(f"{name:<30} {text.count(chr(10)):>5}  {ms:.3f} ({min(scan):.3f}-{max(scan):.3f}){'':<10} "
              f"{mp:.3f} ({min(paste):.3f}-{max(paste):.3f})  {ms / mp:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
