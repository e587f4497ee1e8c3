"""The README's demo transcript, from a real run of `rubin train` (the demo defaults).

    python scripts/readme_demo.py            # run the demo, rewrite the block between the demo markers
    python scripts/readme_demo.py --check    # run it and compare: exit 1 when a loss or accuracy drifted

Throughput and the data/compute split vary from run to run and machine to machine; the losses and
the accuracy of the deterministic demo do not, so --check compares only those.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BEGIN, END = "<!-- demo transcript: scripts/readme_demo.py -->", "<!-- end of demo transcript -->"
FIGURES = re.compile(r"\b(loss|accuracy) (\d+\.\d+)")


def run_demo() -> list[str]:
    """The demo's lines as a user sees them without a terminal: the header, the first and last log lines, eval."""
    with tempfile.TemporaryDirectory(prefix="rubin-demo-") as tmp:
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
        p = subprocess.run([sys.executable, "-m", "rubin", "train", "--set", f"run.dir={tmp}/run"], capture_output=True,
                           text=True, env=env, cwd=tmp, stdin=subprocess.DEVNULL, timeout=3600)
    if p.returncode != 0:
        raise SystemExit(f"readme_demo: the demo failed (exit {p.returncode}): {p.stderr.strip()[-500:]}")
    lines = p.stdout.splitlines()
    steps = [ln for ln in lines if ln.startswith("step ")]
    head = next(ln for ln in lines if ln.startswith("rubin train:"))
    evals = [ln for ln in lines if ln.startswith("eval step ")]
    return [head, steps[0], "...", steps[-1], evals[-1]]


def block(lines: list[str]) -> str:
    return "\n".join([BEGIN, "", "```console", "$ rubin train", *lines, "```", "", END])


def current() -> str:
    text = README.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def figures(text: str) -> list[tuple[str, str]]:
    return FIGURES.findall(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the README instead of rewriting it")
    a = ap.parse_args()
    fresh = block(run_demo())
    if a.check:
        want, got = figures(current()), figures(fresh)
        if want != got:
            print(f"README demo transcript drifted: README {want}, this run {got}; rerun scripts/readme_demo.py",
                  file=sys.stderr)
            return 1
        print(f"README demo transcript matches: {got}")
        return 0
    README.write_text(README.read_text().replace(current(), fresh))
    print(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
