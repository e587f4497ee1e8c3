"""Hang watchdog: a daemon thread that reports and ends a rank whose step stopped advancing.

When this rank's step has not changed for ``timeout_s`` it writes ``hang-rank-N.txt`` (rank,
step, phase and every thread's Python stack via faulthandler), names the stalled rank(s) from
all ranks' heartbeat files, calls ``on_hang``, hands one line to ``say`` (the console's stderr) and
exits non-zero. Every live rank does the same, so the run ends in about ``timeout_s`` instead of
waiting for NCCL's 10-30 minute collective timeout.

The heartbeat files are this module's: its thread writes this rank's (``policy.Heartbeat.flush``)
every poll, also while the loop is stuck, and reads every rank's when it fires. The loop's thread
only updates the heartbeat in memory, so a run without a watchdog writes no heartbeat file.
"""

from __future__ import annotations

import contextlib
import errno
import faulthandler
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from rubin.errors import ExitCode

HEARTBEATS = "heartbeats"
WAITING_PHASES = ("collective", "checkpoint")  # a rank here is usually waiting on a peer, not the cause
STALE_FILE_S = 5.0  # a heartbeat file older than this: that process is dead or frozen (its watchdog cannot write)


def heartbeat_path(run_dir: Path, rank: int) -> Path:
    """Where rank RANK's heartbeat is written (``policy.Heartbeat.flush``, from this module's thread)."""
    return Path(run_dir) / HEARTBEATS / f"rank-{rank}.json"


def read_all(run_dir: Path, world_size: int) -> dict[int, dict | None]:
    out: dict[int, dict | None] = {}
    for r in range(world_size):
        try:
            out[r] = json.loads(heartbeat_path(run_dir, r).read_text())
        except (OSError, ValueError):
            out[r] = None
    return out


def stalled_ranks(beats: dict[int, dict | None], now: float | None = None) -> tuple[list[int], str]:
    """Which ranks stalled, and why, from all heartbeat files."""
    now = time.time() if now is None else now
    missing = [r for r, b in beats.items() if b is None]
    if missing:
        return missing, "no heartbeat file (never started or died)"
    stale = [r for r, b in beats.items() if now - b.get("written_time", 0) > STALE_FILE_S]
    if stale:
        return stale, "heartbeat file no longer updated (process dead or frozen)"
    steps = {r: b["step"] for r, b in beats.items()}
    low = min(steps.values())
    if low != max(steps.values()):
        return sorted(r for r, s in steps.items() if s == low), f"behind the others at step {low}"
    busy = sorted(r for r, b in beats.items() if b.get("phase") not in WAITING_PHASES)
    if busy and len(busy) < len(beats):
        return busy, "in a compute phase while the others wait in a collective"
    oldest = min(b["beat_time"] for b in beats.values())
    return sorted(r for r, b in beats.items() if b["beat_time"] - oldest < 0.5), "oldest heartbeat"


class Watchdog:
    def __init__(
        self,
        heartbeat,  # policy.Heartbeat: the loop's step and phase, written by this thread
        timeout_s: float,
        run_dir: str | os.PathLike,
        rank: int,
        world_size: int,
        on_hang: Callable[[dict], None] | None = None,
        *,
        exit: bool = True,
        poll_s: float | None = None,
        phase_timeouts: dict[str, float] | None = None,
        say: Callable[[str], None] | None = None,
        hosts=None,  # hosts.Hosts: which rank runs where, to name the host of an unreachable peer
    ):
        self.heartbeat, self.timeout_s = heartbeat, float(timeout_s)
        self.hosts = hosts
        self.probe = _Probe(hosts.addrs.get(rank) if hosts is not None else None) if world_size > 1 else None
        if self.probe is not None:
            heartbeat.probe = self.probe.address
        self.run_dir, self.rank, self.world_size = Path(run_dir), rank, world_size
        self.on_hang = on_hang or (lambda details: None)
        self.say = say or (lambda line: None)  # the line is also in the report file and the hang event
        self.exit = exit  # tests of the report itself set False
        # Phases that may legitimately outlast a step (a large checkpoint, a long eval) get their own
        # limit, measured from entering the phase, so a slow save is not mistaken for a hang.
        self.phase_timeouts = dict(phase_timeouts or {})
        self.poll_s = poll_s if poll_s is not None else min(1.0, max(self.timeout_s / 4, 0.05))
        self.report_path = self.run_dir / f"hang-rank-{rank}.txt"
        self.fired: dict | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "Watchdog":
        self.heartbeat.step_changed_at = time.monotonic()  # the clock starts now, not at construction
        self.heartbeat.flush()
        self._thread = threading.Thread(target=self._loop, name=f"rubin-watchdog-{self.rank}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self.probe is not None:
            self.probe.close()
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.heartbeat.flush()  # keeps this rank's file fresh even while the loop is stuck
            hb = self.heartbeat
            if hb.phase in self.phase_timeouts:
                stuck, limit = time.monotonic() - hb.phase_changed_at, self.phase_timeouts[hb.phase]
            else:
                stuck, limit = time.monotonic() - hb.step_changed_at, self.timeout_s
            if stuck >= limit:
                self.fire(stuck)
                return

    def fire(self, stuck_s: float) -> dict:
        hb = self.heartbeat
        time.sleep(min(1.5, self.poll_s * 2))  # let peers' watchdogs refresh their files once more
        beats = read_all(self.run_dir, self.world_size)
        silent = unreachable(beats, self.rank)
        if silent:  # the network, not the program: name who does not answer, and ask for a retry
            names = silent
            why = f"does not answer on the network from {self._who(self.rank)} (packets dropped: a partition, or its host is down)"
        else:
            names, why = stalled_ranks(beats)
        details = {"rank": self.rank, "step": hb.step, "phase": hb.phase, "stuck_s": round(stuck_s, 2),
                   "timeout_s": self.timeout_s, "stalled_ranks": names, "why": why, "report": str(self.report_path),
                   "unreachable": bool(silent)}
        self._write_report(details)
        self.fired = details
        try:
            self.on_hang(details)
        except Exception:  # noqa: BLE001 - reporting must not stop the exit
            pass
        many_hosts = self.hosts is not None and self.hosts.count > 1
        who = ", ".join(self._who(r) for r in names) if many_hosts else f"rank(s) {', '.join(map(str, names))}"
        msg = (f"rubin: error: hang: {who} {'stalled (' + why + ')' if not silent else why}; this rank {self.rank} made no "
               f"progress for {stuck_s:.1f} s at step {hb.step} (phase {hb.phase}), over faults.hang_timeout_s="
               f"{self.timeout_s:g}; stacks in {self.report_path}" + ("; exit 75: a retry resumes from the last committed "
                                                                       "checkpoint" if silent else ""))
        try:
            self.say(msg)
        except Exception:  # noqa: BLE001 - a closed stderr must not keep a hung rank alive
            pass
        if self.exit:
            sys.stdout.flush()
            os._exit(int(ExitCode.PREEMPTED if silent else ExitCode.FAILURE))
        return details

    def _who(self, rank: int) -> str:
        return self.hosts.describe(rank) if self.hosts is not None else f"rank {rank}"

    def _write_report(self, details: dict) -> None:
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            with open(self.report_path, "w") as f:
                for key in ("rank", "step", "phase", "stuck_s", "timeout_s", "stalled_ranks", "why"):
                    f.write(f"{key}: {details[key]}\n")
                f.write("\nPython stacks of all threads:\n")
                f.flush()
                faulthandler.dump_traceback(file=f, all_threads=True)
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            pass


class _Probe:
    """A listening socket whose address goes into this rank's heartbeat: when a watchdog fires, it tries each
    peer's, which tells a peer the network cannot reach from one that is reachable but stuck. The kernel
    completes a connection to a listening socket by itself, so nothing here has to run to answer."""

    def __init__(self, addr: str | None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("0.0.0.0", 0))
        self.sock.listen(64)
        self.sock.setblocking(False)
        self.address = [addr or socket.gethostname(), self.sock.getsockname()[1]]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def unreachable(beats: dict[int, dict | None], me: int, timeout: float = 2.0) -> list[int]:
    """The peers whose probe this host cannot connect to within TIMEOUT (dropped packets, or a host that is gone)."""
    silent = []
    for r, b in beats.items():
        if r == me or not b or not b.get("probe"):
            continue
        host, port = b["probe"]
        try:
            socket.create_connection((host, int(port)), timeout=timeout).close()
        except (socket.timeout, TimeoutError):
            silent.append(r)
        except OSError as err:  # refused (nothing listens: its process died), no route (its host is gone)
            if err.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
                silent.append(r)
    return silent
