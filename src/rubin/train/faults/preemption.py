"""Preemption: a signal only sets a flag; the ranks agree to stop at the next step boundary.

Doing real work inside a signal handler (saving, collectives) is unsafe: the handler runs
between two bytecodes of whatever the loop was doing, possibly inside a collective. So the
handler records the signal and returns, and ``should_stop`` all-reduces the flag at a step
boundary, so every rank stops at the same step and none is left blocking in a collective.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from typing import Callable

DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


class PreemptionHandler:
    def __init__(self, signals=DEFAULT_SIGNALS):
        self.signals = tuple(signals)
        self.requested = False
        self.signal_name: str | None = None
        self.received_at: float | None = None  # time.monotonic() of the first signal
        self.count = 0
        self._previous: dict = {}

    def _handle(self, signum, frame) -> None:
        self.count += 1
        if self.requested and signum == signal.SIGINT and self.count > 1:
            raise KeyboardInterrupt  # a second Ctrl-C: the person at the keyboard wants out now
        if not self.requested:
            self.requested = True
            self.signal_name = signal.Signals(signum).name
            self.received_at = time.monotonic()

    def install(self) -> "PreemptionHandler":
        if threading.current_thread() is not threading.main_thread():
            return self  # Python only delivers signals to the main thread; nothing to install from here
        for sig in self.signals:
            if sig not in self._previous:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def uninstall(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, prev in self._previous.items():
            signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
        self._previous.clear()

    def seconds_since(self) -> float | None:
        return None if self.received_at is None else time.monotonic() - self.received_at

    def should_stop(self, all_reduce_max: Callable[[int], int] | None = None) -> bool:
        """At a step boundary: True on every rank when any rank got a signal."""
        flag = int(self.requested)
        return bool(all_reduce_max(flag)) if all_reduce_max is not None else bool(flag)


def all_reduce_max_fn(group=None, device="cpu") -> Callable[[int], int]:
    """The ``all_reduce_max`` that ``should_stop`` takes, over torch.distributed (identity when not initialized)."""

    def reduce(value: int) -> int:
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return int(value)
        t = torch.tensor([int(value)], dtype=torch.int64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        return int(t.item())

    return reduce


def worker_init(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: ignore SIGINT/SIGTERM and seed numpy/random per worker.

    The signal goes to the whole process group, workers included. A worker that dies on it
    makes the main process raise "DataLoader worker exited unexpectedly" before it can save;
    ignoring it leaves the stop to the main process, which shuts the workers down itself.
    """
    import numpy as np
    import torch

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    seed = torch.initial_seed() % (2**32)  # torch already made this distinct per worker and per epoch
    random.seed(seed)
    np.random.seed(seed)
