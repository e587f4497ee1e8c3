"""Test-only fault injection, read from the environment variable RUBIN_FAULT.

``RUBIN_FAULT="crash@step=7,rank=1;nan@step=4"``: specs separated by ``;``, each
``KIND@key=value,...``. Kinds:

- ``crash``: SIGKILL this process (a real, unclean death)
- ``stall``: sleep ``seconds`` (default 3600) at that point, as a hung rank would
- ``pause``: sleep ``seconds`` (default 30), announcing it on stderr, then carry on
- ``sigterm``: send SIGTERM to this process (preemption)
- ``nan``: ``fault_point`` returns True, and the trainer turns the loss into NaN
- ``diskfull``: the checkpoint writer raises OSError(ENOSPC) during save number ``save``

Keys: ``step``, ``rank``, ``phase`` (the named point; default ``step``; ``setup`` = the run is
built and restored, no step taken yet; ``checkpoint`` = files written, nothing committed;
``manifest``; ``commit``), ``save`` (1-based save count),
``seconds``, ``restart`` (TORCHELASTIC_RESTART_COUNT the fault fires on; default 0, so an
elastic restart does not crash again; ``any`` for every attempt).

With RUBIN_FAULT unset, ``ARMED`` is False and the loop and the checkpoint store make no call
into this module at all; ``fault_point`` itself is one global lookup and a return.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field

from rubin.errors import bad_value

_log = logging.getLogger("rubin.fault")
KINDS = ("crash", "stall", "pause", "sigterm", "nan", "diskfull")
KEYS = ("step", "rank", "phase", "save", "seconds", "restart")


@dataclass
class Fault:
    kind: str
    where: dict = field(default_factory=dict)

    def matches(self, point: str, step: int | None, rank: int | None, save: int | None = None) -> bool:
        w = self.where
        default_point = {"nan": "nan", "diskfull": "write"}.get(self.kind, "step")
        if w.get("phase", default_point) != point:
            return False
        if "step" in w and step is not None and int(w["step"]) != int(step):
            return False
        if "step" in w and step is None:
            return False
        if "rank" in w and rank is not None and int(w["rank"]) != int(rank):
            return False
        if "save" in w and (save is None or int(w["save"]) != int(save)):
            return False
        restart = w.get("restart", "0")
        if restart != "any" and int(restart) != int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")):
            return False
        return True


def parse(text: str) -> list[Fault]:
    faults = []
    for chunk in filter(None, (c.strip() for c in text.split(";"))):
        kind, _, rest = chunk.partition("@")
        if kind not in KINDS:
            raise bad_value("RUBIN_FAULT", chunk, f"the kind must be one of {', '.join(KINDS)}", "e.g. crash@step=7,rank=1")
        where = {}
        for kv in filter(None, (p.strip() for p in rest.split(","))):
            key, eq, value = kv.partition("=")
            if not eq or key not in KEYS:
                raise bad_value("RUBIN_FAULT", chunk, f"keys are {', '.join(KEYS)} as key=value", "e.g. stall@step=5,rank=0")
            where[key] = value
        faults.append(Fault(kind, where))
    return faults


_UNSET = object()
ARMED = bool(os.environ.get("RUBIN_FAULT"))  # read by the hot paths before they call in here
_faults = _UNSET
_save_index = 0
_save_rank: int | None = None


def active() -> list[Fault]:
    global _faults
    if _faults is _UNSET:
        text = os.environ.get("RUBIN_FAULT", "")
        _faults = parse(text) if text else []
    return _faults


def reload() -> list[Fault]:
    """Re-read RUBIN_FAULT (tests that change it in-process)."""
    global _faults, _save_index, ARMED
    _faults = _UNSET
    _save_index = 0
    ARMED = bool(os.environ.get("RUBIN_FAULT"))
    return active()


def note_save(index: int, rank: int | None = None) -> None:
    """The store counts its saves here, so ``diskfull@save=N`` knows which save is in progress."""
    global _save_index, _save_rank
    _save_index, _save_rank = index, rank


def _announce(msg: str) -> None:
    # Test-only: the line a test reads in the rank's stderr. Through logging (Python's last-resort handler
    # writes WARNING lines to stderr), not print: nothing below the CLI prints.
    _log.warning("rubin-fault: %s", msg)


def fault_point(name: str, step: int | None, rank: int | None = 0) -> bool:
    """Fire the faults that match this named point; True when one matched (for ``nan``)."""
    faults = _faults if _faults is not _UNSET else active()
    if not faults:
        return False
    hit = False
    for f in faults:
        if not f.matches(name, step, rank, _save_index):
            continue
        hit = True
        where = f"{name} step={step} rank={rank}"
        if f.kind == "crash":
            _announce(f"crash at {where}")
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        elif f.kind in ("stall", "pause"):
            seconds = float(f.where.get("seconds", 3600 if f.kind == "stall" else 30))
            _announce(f"{f.kind} {seconds:g} s at {where}")
            time.sleep(seconds)
        elif f.kind == "sigterm":
            _announce(f"sigterm at {where}")
            os.kill(os.getpid(), signal.SIGTERM)
    return hit


def maybe_disk_full(path) -> None:
    """Called by the checkpoint writer before each file: raise ENOSPC where RUBIN_FAULT asks."""
    faults = _faults if _faults is not _UNSET else active()
    if not faults:
        return
    for f in faults:
        if f.kind == "diskfull" and f.matches("write", f.where.get("step"), _save_rank, _save_index):
            _announce(f"diskfull at save={_save_index} writing {path}")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
