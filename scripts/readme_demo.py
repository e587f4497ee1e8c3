"""The README's demo transcript, from a real run of `rubin train` (the demo defaults).

    python scripts/readme_demo.py            # run the demo, rewrite the block between the demo markers
    python scripts/readme_demo.py --check    # run it and compare: exit 1 when a loss or accuracy drifted

Throughput and the data/compute split vary from run to run and machine to machine, so --check compares
only the losses and the accuracy. The demo is deterministic on one kind of CPU, but its float sums
differ between vector paths (AVX2 or AVX-512, Intel or AMD math libraries), and after 1,320 steps so do
its last losses. The block records the CPU it was written on: on that kind of CPU --check demands the
same figures digit for digit; on another it demands the same first loss and a final state within a
band (accuracy within 0.015, final losses within a factor of 5), which catches a demo that no longer
trains but not a small change, and says which check it ran.
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
WRITTEN_ON = re.compile(r"<!-- written on: (.+?) -->")
THREADS = "2"
FIRST_LOSS_TOL, ACCURACY_TOL, LOSS_FACTOR = 0.002, 0.015, 5.0


def cpu_kind() -> str:
    """What decides the demo's float sums: architecture, vendor, torch's vector path, torch, threads."""
    import platform

    import torch

    vendor = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("vendor_id", "CPU implementer")):
                vendor = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    threads = os.environ.get("OMP_NUM_THREADS", THREADS)
    return (f"{platform.machine()} {vendor} {torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__},"
            f" {threads} threads")


def run_demo() -> list[str]:
    """The demo's lines as a user sees them without a terminal: the header, the first and last log lines, eval."""
    with tempfile.TemporaryDirectory(prefix="rubin-demo-") as tmp:
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", THREADS))
        p = subprocess.run([sys.executable, "-m", "rubin", "train", "--set", f"run.dir={tmp}/run"], capture_output=True,
                           text=True, env=env, cwd=tmp, stdin=subprocess.DEVNULL, timeout=3600)
    if p.returncode != 0:
        raise SystemExit(f"readme_demo: the demo failed (exit {p.returncode}): {p.stderr.strip()[-500:]}")
    lines = p.stdout.splitlines()
    steps = [ln for ln in lines if ln.startswith("step ")]
    head = next(ln for ln in lines if ln.startswith("rubin train:"))
    evals = [ln for ln in lines if ln.startswith("eval step ")]
    return [head, steps[0], "...", steps[-1], evals[-1]]


def block(lines: list[str], kind: str) -> str:
    return "\n".join([BEGIN, f"<!-- written on: {kind} -->", "", "```console", "$ rubin train", *lines, "```", "", END])


def current() -> str:
    text = README.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def figures(text: str) -> list[tuple[str, str]]:
    return FIGURES.findall(text)


def within_band(want: list[tuple[str, str]], got: list[tuple[str, str]]) -> str:
    """'' when GOT is within the cross-CPU band of WANT, else what is outside it."""
    if [k for k, _ in want] != [k for k, _ in got]:
        return f"other figures: {want} vs {got}"
    w, g = [float(v) for _, v in want], [float(v) for _, v in got]
    if abs(w[0] - g[0]) > FIRST_LOSS_TOL:
        return f"first loss {g[0]} vs {w[0]} (tolerance {FIRST_LOSS_TOL})"
    for (kind, a), b in zip(zip([k for k, _ in want[1:]], w[1:]), g[1:]):
        if kind == "accuracy" and abs(a - b) > ACCURACY_TOL:
            return f"accuracy {b} vs {a} (tolerance {ACCURACY_TOL})"
        if kind == "loss" and not (a / LOSS_FACTOR <= b <= a * LOSS_FACTOR):
            return f"loss {b} vs {a} (band: a factor of {LOSS_FACTOR:g})"
    return ""


def check(readme_block: str, fresh: list[str], kind: str) -> tuple[bool, str]:
    """(passes, what was checked) for a fresh run on a CPU of KIND against the README's block."""
    want, got = figures(readme_block), figures("\n".join(fresh))
    written = WRITTEN_ON.search(readme_block)
    if written and written.group(1) == kind:
        if want != got:
            return False, f"README {want}, this run {got} on the same kind of CPU ({kind})"
        return True, f"the same figures on the same kind of CPU ({kind}): {got}"
    why = within_band(want, got)
    where = f"written on {written.group(1) if written else 'an unrecorded CPU'}, run on {kind}"
    if why:
        return False, f"{why}; {where}"
    return True, f"within the cross-CPU band ({where}): README {want}, this run {got}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the README instead of rewriting it")
    a = ap.parse_args()
    lines, kind = run_demo(), cpu_kind()
    if a.check:
        ok, what = check(current(), lines, kind)
        if not ok:
            print(f"README demo transcript drifted: {what}; rerun scripts/readme_demo.py", file=sys.stderr)
            return 1
        print(f"README demo transcript matches: {what}")
        return 0
    fresh = block(lines, kind)
    README.write_text(README.read_text().replace(current(), fresh))
    print(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
