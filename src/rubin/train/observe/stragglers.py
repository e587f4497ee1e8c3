"""Stragglers without a profiler: each rank's own time per step, shared in the check's all-reduce.

A rank's *own* time is what it spends before it joins the step's gradient collective: waiting for
its data, copying it to the device and running forward (the loop's data, forward and backward
beats mark it). Peers wait for the slowest rank inside DDP's all-reduce, so their wall step times
are equal; their own times are not. Each rank writes its mean own time (microseconds) into its
slot of the MAX all-reduce the fault check already runs, so every rank learns all of them with no
extra collective and no extra sync. A rank slower than the median of the others by more than
``SHARE`` of their time (and ``MIN_S``) at ``PERSIST`` checks in a row is named: one
``straggler`` event, and the summary.
"""

from __future__ import annotations

import statistics
import time

SHARE = 0.20
MIN_S = 0.002  # below this a difference is scheduling noise
PERSIST = 3


class StragglerRecorder:
    def __init__(self, rank: int, world_size: int, event=None):
        self.rank, self.world = rank, world_size
        self.event = event or (lambda *a, **k: None)
        self._mark: float | None = None
        self._own, self._steps = 0.0, 0
        self.totals = [0.0] * world_size  # sum of per-check means, per rank
        self.checks = 0
        self.streak: tuple[int | None, int] = (None, 0)
        self.named: dict | None = None

    def beat(self, phase: str) -> None:
        now = time.perf_counter()
        if phase == "data":
            self._mark, self._steps = now, self._steps + 1
        elif phase == "forward":
            if self._mark is not None:  # the data wait and the copy to the device, before the first micro-batch
                self._own += now - self._mark
            self._mark = now
        elif phase == "backward" and self._mark is not None:
            self._own += now - self._mark  # forward
            self._mark = None

    def slots(self) -> list[int]:
        """This rank's mean own time since the last check, in its slot; zeros elsewhere (the MAX keeps each rank's)."""
        out = [0] * self.world
        out[self.rank] = int(1e6 * self._own / self._steps) if self._steps else 0
        self._own, self._steps = 0.0, 0
        return out

    def update(self, agreed: list[int], step: int) -> None:
        own = [v / 1e6 for v in agreed]
        if not any(own):
            return
        self.checks += 1
        self.totals = [t + o for t, o in zip(self.totals, own)]
        slow = max(range(self.world), key=own.__getitem__)
        others = statistics.median(o for r, o in enumerate(own) if r != slow)
        excess = own[slow] - others
        if excess > max(SHARE * others, MIN_S):
            n = self.streak[1] + 1 if self.streak[0] == slow else 1
            self.streak = (slow, n)
            if n == PERSIST and (self.named is None or self.named["rank"] != slow):
                self.named = {"rank": slow, "step": step, "own_s": own[slow], "others_s": others, "excess_s": excess}
                self.event("straggler", **self.named, own_per_rank_s=own)
        else:
            self.streak = (None, 0)

    def summary(self) -> dict:
        if not self.checks:
            return {}
        return {"straggler": self.named, "own_step_s_per_rank": [t / self.checks for t in self.totals]}
