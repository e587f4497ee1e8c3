"""What the training progress bar costs per step: the rich bar on a (pseudo-)terminal against plain lines.

The loop calls the console at log points only, so a step between them costs nothing; this measures
the log point itself and spreads it over the steps it covers. Both sides run in this process on the
same fake rows, interleaved trial by trial:

  bar    Console with a rich progress bar drawing to a terminal-like stream (a real TTY is faked)
  plain  Console writing one plain line per log point (what CI logs get)
  off    Console disabled (--quiet)

It prints microseconds per log point and per step (at --log-every), medians over --trials with the
min-max spread, and the ratios bar/plain and bar/off. A training step on the demo takes ~20 ms on
a CPU, so a few microseconds per step is what "costs nothing" means here.

    python benchmarks/progress_cost.py [--points 200] [--trials 7] [--log-every 20]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time


def _console_cls():
    from rubin.train.observe.console import Console

    return Console


class _FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _row(step: int) -> dict:
    return {"step": step, "loss": 1.0 / step, "samples_per_s": 2800.0 + step % 7,
            "time": {"data_s": 0.0007, "compute_s": 0.021, "ckpt_s": 0.0, "step_s": 0.022}}


def one_trial(kind: str, points: int, every: int) -> float:
    """Seconds per log point for POINTS log points."""
    Console = _console_cls()
    real = sys.stdout
    sys.stdout = _FakeTty() if kind == "bar" else io.StringIO()
    try:
        c = Console(quiet=kind == "off")
        c.begin(points * every, main=True)
        if kind == "bar":
            assert c._progress is not None, "the bar did not start on a terminal"
        t0 = time.perf_counter()
        for i in range(1, points + 1):
            c.logged(_row(i * every))
        dt = time.perf_counter() - t0
        c.close()
    finally:
        sys.stdout = real
    return dt / points


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=200, help="log points per trial")
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--log-every", type=int, default=20, help="steps per log point (the demo's telemetry.log_every_steps)")
    a = ap.parse_args()
    kinds = ("bar", "plain", "off")
    got: dict[str, list[float]] = {k: [] for k in kinds}
    for t in range(a.trials):
        for k in kinds[t % 3:] + kinds[:t % 3]:  # rotate the order: no side always runs first
            got[k].append(one_trial(k, a.points, a.log_every))
    med = {k: statistics.median(v) for k, v in got.items()}
    print(f"{'console':8} {'us/log point':>14} {'[min, max]':>22} {'us/step':>9}")
    for k in kinds:
        print(f"{k:8} {med[k] * 1e6:14.1f} {f'[{min(got[k]) * 1e6:.1f}, {max(got[k]) * 1e6:.1f}]':>22} "
              f"{med[k] * 1e6 / a.log_every:9.2f}")
    print(f"ratio bar/plain {med['bar'] / med['plain']:.2f}, bar/off {med['bar'] / max(med['off'], 1e-12):.1f} "
          f"(per log point; {a.trials} trials of {a.points} points, log every {a.log_every} steps)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
