"""Preemption: a signal only sets a flag; the ranks agree to stop at the next step boundary.

Doing real work inside a signal handler (saving, collectives) is unsafe: the handler runs
between two bytecodes of whatever the loop was doing, possibly inside a collective. So the
handler records the signal and returns; ``FaultPolicy.check`` (``faults/policy.py``) reads
``requested`` at the loop's next check and agrees on it across ranks, so every rank stops at
the same step and none is left blocking in a collective.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from typing import Callable

# SIGHUP too: a closed terminal or a dropped SSH session sends it, and torchrun forwards it.
DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP)


class PreemptionHandler:
    def __init__(self, signals=DEFAULT_SIGNALS):
        self.signals = tuple(signals)
        self.requested = False
        self.signal_name: str | None = None
        self.received_at: float | None = None  # time.monotonic() of the first signal
        self.count = 0
        self.settled = False  # the emergency save committed: the exit code is decided, signals change nothing
        self._committed: Callable[[], bool] | None = None  # asked by the handler: has the emergency save committed?
        self._previous: dict = {}

    def _handle(self, signum, frame) -> None:
        self.count += 1
        if self.settled or (self._committed is not None and self._committed()):
            self.settled = True
            return
        if self.requested and signum == signal.SIGINT and self.count > 1:
            raise KeyboardInterrupt  # a second Ctrl-C before the save committed: the person at the keyboard wants out now
        if not self.requested:
            self.requested = True
            self.signal_name = signal.Signals(signum).name
            self.received_at = time.monotonic()

    def _ignore_at_exit(self) -> None:
        # Interpreter shutdown resets Python-level handlers to SIG_DFL, so a signal arriving then would
        # still kill the process; SIG_IGN is left alone by the shutdown.
        for sig in self._previous:
            signal.signal(sig, signal.SIG_IGN)

    def install(self) -> "PreemptionHandler":
        if threading.current_thread() is not threading.main_thread():
            return self  # Python only delivers signals to the main thread; nothing to install from here
        for sig in self.signals:
            if sig not in self._previous:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def settle_when(self, committed: Callable[[], bool]) -> None:
        """Before the emergency save: COMMITTED() tells the handler, exactly from the commit on, that signals are moot."""
        self._committed = committed

    def settle(self) -> None:
        """The emergency save has committed: from now on the process exits 75 whatever signal comes."""
        self.settled = True

    def uninstall(self) -> None:
        """Restore the previous handlers, unless a stop has settled: then a late signal (a second Ctrl-C,
        torchrun's SIGTERM) arriving between here and the exit would still kill the process or turn exit 75
        into 130, so the handler stays installed and keeps ignoring them until the process ends."""
        if threading.current_thread() is not threading.main_thread():
            return
        if self.settled:
            import atexit

            atexit.register(self._ignore_at_exit)
            return
        for sig, prev in self._previous.items():
            signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
        self._previous.clear()


def _die_with_parent() -> None:
    """Linux: the kernel kills this worker when its parent dies, so no worker outlives a killed trainer."""
    import ctypes
    import os
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)


_reaper_installed = False


def reap_workers_at_exit() -> None:
    """At interpreter exit, kill DataLoader workers still alive, before multiprocessing joins them.

    Workers ignore SIGTERM (they must survive one sent to the whole process group during
    training), so multiprocessing's own exit handler, which sends SIGTERM and then joins every
    daemonic child without a timeout, would wait forever on a worker whose iterator was never
    closed. atexit runs handlers last-registered-first, so this one runs before that join.
    """
    global _reaper_installed
    if _reaper_installed:
        return
    import atexit
    import multiprocessing.util  # noqa: F401 - registers its own exit handler first, so ours runs before it

    atexit.register(_reap_workers)
    _reaper_installed = True


def _reap_workers() -> None:
    """What multiprocessing's exit does to daemonic children (terminate, join), with a SIGKILL for those ignoring SIGTERM."""
    import multiprocessing

    daemons = [p for p in multiprocessing.active_children() if p.daemon]
    if not daemons:
        return
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # torch's handler would raise "worker killed" at exit
    for p in daemons:
        p.terminate()
    deadline = time.monotonic() + 1.0
    for p in daemons:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in daemons:
        if p.is_alive():
            p.kill()
            p.join(timeout=5)


def worker_init(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: ignore SIGINT/SIGTERM and seed numpy/random per worker.

    The signal goes to the whole process group, workers included. A worker that dies on it
    makes the main process raise "DataLoader worker exited unexpectedly" before it can save;
    ignoring it leaves the stop to the main process, which shuts the workers down itself.
    """
    import gc

    import numpy as np
    import torch

    gc.enable()  # the trainer collects at step boundaries (gcpolicy); a worker has no steps and collects as usual
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    _die_with_parent()
    seed = torch.initial_seed() % (2**32)  # torch already made this distinct per worker and per epoch
    random.seed(seed)
    np.random.seed(seed)


reap_workers_at_exit()  # importing the worker init means workers may be made: never let one block the exit
