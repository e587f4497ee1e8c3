"""One writer per run dir: an exclusive lock held for the run's lifetime.

Two jobs on one run dir would both train every step, interleave ``events.jsonl`` and race on
checkpoint folders. The lock is a file in the run dir holding the owner's host, PID and start
time, plus an ``flock`` on it where the filesystem supports that. ``flock`` is released by the
kernel when the process dies, so a crash never leaves a lock that blocks the next attempt; the
file's contents say who holds it and let a lock on a filesystem without ``flock`` (some network
filesystems) be judged stale when its process is gone on this host.

Under torchrun only rank 0 takes it, before the others are told the run dir is ready.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import time
from pathlib import Path

from rubin.errors import UsageError

LOCK = ".lock"
_held: dict[str, RunLock] = {}  # run dir -> this process's lock (re-entrant within one process)


class RunLock:
    def __init__(self, run_dir: Path, fd: int, flocked: bool, taken_over: dict | None):
        self.run_dir, self.fd, self.flocked = Path(run_dir), fd, flocked
        self.taken_over = taken_over  # the stale owner's record when this lock replaced one, else None

    def release(self) -> None:
        """Mark the lock free (empty file) and drop the flock. The file stays: unlinking would let a
        process that already opened it lock a name-less inode while a third one makes a new file."""
        if self.fd < 0:
            return
        try:
            os.ftruncate(self.fd, 0)
        except OSError:
            pass
        try:
            os.close(self.fd)  # closing drops the flock
        finally:
            self.fd = -1
            _held.pop(str(self.run_dir.resolve()), None)


def owner_text(rec: dict) -> str:
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(rec.get("start_time", 0)))
    return f"PID {rec.get('pid', '?')} on {rec.get('host', '?')} since {since}"


def _pid_alive(pid) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _read(fd: int) -> dict | None:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 4096)
    if not raw.strip():
        return None
    try:
        rec = json.loads(raw)
    except ValueError:
        return {"pid": None, "host": "?", "start_time": 0, "garbled": True}
    return rec if isinstance(rec, dict) else None


def _in_use(run_dir: Path, rec: dict | None) -> UsageError:
    who = owner_text(rec) if rec else "another process"
    return UsageError(
        f"run dir {str(run_dir)!r} in use by {who}: two jobs must not write one run; "
        f"wait for it to finish, stop it, or use another run.dir (if that process is gone, delete {str(run_dir / LOCK)!r})"
    )


def acquire(run_dir: str | os.PathLike) -> RunLock:
    """Take the run dir's lock (creating the dir), or a one-line UsageError naming the holder.

    A record left by a process that is gone (flock free, or its PID dead on this host) is stale:
    the lock is taken over and ``RunLock.taken_over`` holds the old record, for an event.
    """
    import fcntl

    run_dir = Path(run_dir)
    key = str(run_dir.resolve())
    if key in _held and _held[key].fd >= 0:
        return _held[key]
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        flocked = True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise _in_use(run_dir, _read(fd)) from None
            flocked = False  # ENOLCK / EOPNOTSUPP: no flock here; the record alone decides
        old = _read(fd)
        me = {"host": socket.gethostname(), "pid": os.getpid(), "start_time": time.time(), "flock": flocked}
        if old is not None and not flocked:
            same_host = old.get("host") == me["host"]
            if not same_host or _pid_alive(old.get("pid")):
                raise _in_use(run_dir, old)
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, (json.dumps(me) + "\n").encode())
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        raise
    lock = _held[key] = RunLock(run_dir, fd, flocked, old)
    return lock


def release(run_dir: str | os.PathLike) -> None:
    lock = _held.get(str(Path(run_dir).resolve()))
    if lock is not None:
        lock.release()


def check_writable_dir(path: str | os.PathLike, name: str = "run.dir", fix: str = "") -> None:
    """Refuse, before anything is written, a directory that cannot be created or written to."""
    problem = dir_problem(path)
    if problem:
        raise UsageError(f"{name}={str(path)!r} is not valid: {problem}; {fix or f'set {name} to a writable directory'}")


def dir_problem(path: str | os.PathLike) -> str | None:
    """Why PATH cannot be used (created if missing) as a writable directory, or None."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        return "it exists and is not a directory"
    probe = p
    while not probe.exists():
        if probe.is_symlink():  # a dangling symlink
            return f"{str(probe)!r} is a broken symlink"
        probe = probe.parent
    if not probe.is_dir():
        return f"{str(probe)!r} is a file, so nothing can be created under it"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{str(probe)!r} is on {'a read-only filesystem' if _read_only_fs(probe) else 'a directory this user cannot write'}"
    return None


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False
