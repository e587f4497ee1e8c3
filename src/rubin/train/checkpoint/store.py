"""CheckpointStore: step folders that count only once committed, with fallback and retention.

The commit protocol (one folder per step under ``root``):

1. ``begin``: rank 0 creates ``.tmp-step-NNNNNNNN`` (removing a stale one), barrier; every rank
   writes and fsyncs its files into it.
2. ``commit``: barrier (all files are on disk) -> rank 0 hashes every file into MANIFEST.json,
   fsyncs it, writes COMMITTED last, fsyncs, renames the folder to ``step-NNNNNNNN`` (atomic on
   one filesystem), fsyncs ``root``, applies retention -> barrier. A crash at any point leaves
   either a ``.tmp-*`` folder (ignored, cleaned at the next start) or a complete step folder.

The tmp name is deterministic rather than random so that every rank can find it without a
broadcast; a stale one can only come from a dead process, and rank 0 removes it before anyone
writes (the begin barrier orders that).

Reading back (``restore``): newest first, a folder counts only if it verifies (``manifest.verify``:
marker, hashes, optional HMAC, and no pickle that is not plain data) and then loads; anything that
goes wrong on the way means "invalid, fall back", with an event and a line each. Skipped folders go
to ``quarantine/`` as evidence, and a resume over checkpoints that are all bad is refused.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from pathlib import Path
from typing import Callable, NamedTuple

from rubin.errors import ExitCode, RubinError, bad_value
from rubin.train.checkpoint import manifest as mf
from rubin.train.checkpoint.manifest import disk_full_error, fsync_dir, is_disk_full
from rubin.train.faults import inject

STEP_RE = re.compile(r"^step-(\d{8,})$")
TMP_PREFIX = ".tmp-step-"
TRASH_PREFIX = ".trash-"
QUARANTINE = "quarantine"  # invalid step folders moved out of resume's way, never deleted


class Skipped(NamedTuple):
    step: int
    path: Path
    reason: str


def _short(problems: list[str], limit: int = 2) -> str:
    more = f" (+{len(problems) - limit} more)" if len(problems) > limit else ""
    return "; ".join(problems[:limit]) + more


def _noop_event(kind: str, details: dict) -> None:
    return None


class CheckpointStore:
    def __init__(
        self,
        root: str | os.PathLike,
        *,
        keep_last: int,
        keep_every_steps: int | None = None,
        rank: int = 0,
        world_size: int = 1,
        barrier: Callable[[], None] = lambda: None,
        on_event: Callable[[str, dict], None] = _noop_event,
        done_timeout_s: float = 600.0,
    ):
        if not isinstance(keep_last, int) or keep_last < 1:
            raise bad_value("checkpoint.keep_last", keep_last, "an integer >= 1", "keep at least the newest checkpoint")
        if keep_every_steps is not None and (not isinstance(keep_every_steps, int) or keep_every_steps < 1):
            raise bad_value("checkpoint.keep_every_steps", keep_every_steps, "a positive integer or unset")
        self.root = Path(root)
        self.keep_last, self.keep_every_steps = keep_last, keep_every_steps
        self.rank, self.world_size = rank, world_size
        self.barrier, self.on_event = barrier, on_event
        self.done_timeout_s = done_timeout_s
        self.saves_begun = 0
        self._begun_at: dict[int, float] = {}
        if rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            self.clean_stale()

    # -- naming ------------------------------------------------------------------------
    def step_dir(self, step: int) -> Path:
        return self.root / ("step-%08d" % step)

    def tmp_dir(self, step: int) -> Path:
        return self.root / (TMP_PREFIX + "%08d" % step)

    def clean_stale(self) -> list[Path]:
        """Remove ``.tmp-*`` and ``.trash-*`` folders left by a dead process (rank 0, at start)."""
        removed = []
        if self.root.is_dir():
            for p in self.root.iterdir():
                if p.name.startswith((TMP_PREFIX, TRASH_PREFIX)) and p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
                    removed.append(p)
        return removed

    # -- writing -----------------------------------------------------------------------
    def begin(self, step: int) -> Path:
        self.saves_begun += 1
        if inject.ARMED:
            inject.note_save(self.saves_begun, self.rank)
        tmp = self.tmp_dir(step)
        self._begun_at[step] = time.perf_counter()
        if self.rank == 0:
            if tmp.exists():
                shutil.rmtree(tmp)
            try:
                tmp.mkdir(parents=True)
            except OSError as err:
                if is_disk_full(err):
                    raise disk_full_error(tmp, err) from err
                raise
        self.barrier()
        return tmp

    def commit(self, step: int, tmp: Path, meta: dict, *, coordinate: str = "barrier") -> Path:
        """Make TMP the checkpoint of STEP (see the module docstring).

        ``coordinate="files"`` replaces both barriers by ``.done-rank-N`` files that rank 0 waits
        for: that is what the background thread of AsyncCheckpointer uses, because a collective
        issued from a second thread on the training process group can interleave with the
        loop's own collectives and deadlock or corrupt them.
        """
        tmp = Path(tmp)
        if inject.ARMED:
            inject.fault_point("checkpoint", step, self.rank)  # every rank: files written, nothing committed yet
        if coordinate == "files":
            return self._commit_by_files(step, tmp, meta)
        self.barrier()
        final = self.step_dir(step)
        error = None
        if self.rank == 0:
            try:
                self._finalize(step, tmp, meta)
            except BaseException as err:  # noqa: BLE001 - re-raised after the barrier, so peers are not left waiting
                error = err
        self.barrier()
        if error is not None:
            self.abort(tmp)
            if is_disk_full(error) and not isinstance(error, RubinError):
                raise disk_full_error(tmp, error) from error
            raise error
        if self.rank != 0 and not (final / mf.COMMITTED).is_file():
            raise RubinError(f"checkpoint of step {step} was not committed by rank 0 (see its log); the previous one is kept")
        return final

    def _commit_by_files(self, step: int, tmp: Path, meta: dict) -> Path:
        mf.write_durable(tmp / f"{mf.DONE_PREFIX}{self.rank}", b"done\n")
        final = self.step_dir(step)
        if self.rank != 0:
            return final
        deadline = time.monotonic() + self.done_timeout_s
        while True:
            missing = [r for r in range(self.world_size) if not (tmp / f"{mf.DONE_PREFIX}{r}").is_file()]
            if not missing:
                break
            if time.monotonic() > deadline:
                self.abort(tmp)
                raise RubinError(
                    f"checkpoint of step {step}: rank(s) {missing} did not finish writing within {self.done_timeout_s:g} s; "
                    "the partial checkpoint was discarded and the previous one is kept"
                )
            time.sleep(0.05)
        for r in range(self.world_size):
            (tmp / f"{mf.DONE_PREFIX}{r}").unlink(missing_ok=True)
        try:
            self._finalize(step, tmp, meta)
        except BaseException as err:
            self.abort(tmp)
            if is_disk_full(err) and not isinstance(err, RubinError):
                raise disk_full_error(tmp, err) from err
            raise
        return final

    def _finalize(self, step: int, tmp: Path, meta: dict) -> None:
        t0 = time.perf_counter()
        man = mf.build(tmp, step, meta, world_size=self.world_size)
        digest = mf.write(tmp, man)
        if inject.ARMED:
            inject.fault_point("manifest", step, self.rank)  # manifest written, marker not yet
        mf.write_marker(tmp, step, digest)
        if inject.ARMED:
            inject.fault_point("commit", step, self.rank)  # marker written, not yet renamed
        final = self.step_dir(step)
        trash = None
        if final.exists():  # the same step saved again (after a rollback): swap, then delete the old one
            trash = self.root / f"{TRASH_PREFIX}{final.name}-{os.getpid()}"
            os.rename(final, trash)
        os.rename(tmp, final)
        fsync_dir(self.root)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
        removed = self.apply_retention(trusted_step=step)
        now = time.perf_counter()
        begun = self._begun_at.pop(step, t0)
        self.on_event(
            "checkpoint_saved",  # seconds: begin -> committed (for async: the background part too)
            {"step": step, "path": str(final), "bytes": man["bytes"], "files": len(man["files"]),
             "seconds": round(now - begun, 4), "commit_seconds": round(now - t0, 4), "removed": [s for s, _ in removed]},
        )

    @contextlib.contextmanager
    def saving(self, step: int, meta: dict):
        """``with store.saving(step, meta) as tmp:`` write this rank's files into TMP; on leaving, commit
        (every rank). A write that raises aborts the tmp folder instead, a full disk as one clear error."""
        tmp = self.begin(step)
        try:
            yield tmp
        except BaseException as err:
            self.abort(tmp)
            if is_disk_full(err) and not isinstance(err, RubinError):
                raise disk_full_error(tmp, err) from err
            raise
        self.commit(step, tmp, meta)

    def save(self, step: int, write: Callable[[Path], None], meta: dict) -> Path:
        """begin -> ``write(tmp)`` on every rank -> commit (``saving`` for a caller that writes inline)."""
        with self.saving(step, meta) as tmp:
            write(tmp)
        return self.step_dir(step)

    def abort(self, tmp: Path) -> None:
        """Drop a failed save's tmp folder; committed checkpoints are never touched."""
        tmp = Path(tmp)
        if tmp.name.startswith(TMP_PREFIX) and tmp.parent == self.root:
            shutil.rmtree(tmp, ignore_errors=True)

    # -- reading -----------------------------------------------------------------------
    def _step_dirs(self) -> list[tuple[int, Path]]:
        if not self.root.is_dir():
            return []
        out = []
        for p in self.root.iterdir():
            m = STEP_RE.match(p.name)
            if m and p.is_dir():
                out.append((int(m.group(1)), p))
        return sorted(out)

    def is_committed(self, step: int) -> bool:
        try:
            return (self.step_dir(step) / mf.COMMITTED).is_file()
        except OSError:
            return False

    def committed(self) -> list[tuple[int, Path]]:
        return [(s, p) for s, p in self._step_dirs() if _marked_or_unreadable(p)]

    def verify(self, path: Path) -> list[str]:
        return mf.verify(Path(path))

    def scan(self) -> tuple[tuple[int, Path] | None, list[Skipped]]:
        """(newest step folder that verifies or None, every newer one that does not, with its reason)."""
        skipped: list[Skipped] = []
        for step, path in reversed(self._step_dirs()):
            problems = mf.verify(path)
            if not problems:
                return (step, path), skipped
            skipped.append(self._invalid(step, path, "; ".join(problems)))
        return None, skipped

    def latest_valid(self) -> tuple[int, Path] | None:
        """The newest step folder that is committed and verifies; every newer bad one is reported as an event."""
        return self.scan()[0]

    def _invalid(self, step: int, path: Path, reason: str) -> Skipped:
        self.on_event("checkpoint_invalid", {"step": step, "path": str(path), "reason": reason})
        return Skipped(step, path, reason)

    def restore(self, load: Callable[[Path], object], *, force: bool = False, say: Callable[[str], None] = print):
        """Load the newest checkpoint that verifies and loads; ``(step, path, load(path))`` or None for a fresh start.

        Every checkpoint skipped on the way gets an event and one line through SAY. Anything that goes
        wrong while reading one (an unreadable file, a refused pickle, garbage) means "invalid, fall
        back", never a crash. Skipped folders are moved aside to ``quarantine/`` (rank 0) so that a
        later save of the same step never overwrites the evidence. When checkpoints exist but none
        is usable, starting from scratch would silently throw the run away: that is refused unless
        FORCE, and then the bad ones are moved aside too.
        """
        skipped: list[Skipped] = []
        found = None
        for step, path in reversed(self._step_dirs()):
            problems = mf.verify(path)
            if not problems:
                try:
                    found = (step, path, load(path))
                    break
                except Exception as err:  # noqa: BLE001 - any failure to read a checkpoint means: fall back past it
                    problems = [str(err).splitlines()[0] if str(err) else type(err).__name__]
            skipped.append(self._invalid(step, path, "; ".join(problems)))
            say(f"checkpoint step {step} is invalid, skipped: {_short(problems)}")
        if found is None and skipped and not force:
            raise RubinError(
                f"{len(skipped)} checkpoint(s) in {self.root} exist but none verifies (newest: step {skipped[0].step}): "
                "refusing to start from scratch over them; run `rubin checkpoint verify` on the run dir, "
                "or rerun with --force to move them aside and start from step 0",
                ExitCode.USAGE,
            )
        for bad in skipped:
            aside = self.quarantine(bad.path)
            if aside is not None:
                say(f"checkpoint step {bad.step} moved aside to {aside}")
        return found

    def quarantine(self, path: Path) -> Path | None:
        """Move a bad step folder to ``quarantine/`` (rank 0): out of resume's way, kept as evidence."""
        if self.rank != 0 or not Path(path).exists():
            return None
        dest_dir = self.root / QUARANTINE
        dest_dir.mkdir(exist_ok=True)
        dest = dest_dir / Path(path).name
        n = 1
        while dest.exists():
            n += 1
            dest = dest_dir / f"{Path(path).name}-{n}"
        try:
            _rename_keeping_mode(Path(path), dest)
        except OSError as err:
            self.on_event("warning", {"message": f"could not move the invalid checkpoint {path} aside: {err.strerror or err}"})
            return None
        self.on_event("checkpoint_quarantined", {"path": str(path), "moved_to": str(dest)})
        return dest

    # -- retention ---------------------------------------------------------------------
    def retained(self, steps: list[int]) -> set[int]:
        keep = set(steps[-self.keep_last:])
        if self.keep_every_steps:
            keep |= {s for s in steps if s % self.keep_every_steps == 0}
        return keep

    def apply_retention(self, trusted_step: int | None = None) -> list[tuple[int, Path]]:
        """Delete committed folders outside keep_last / keep_every_steps, never the newest verified one.

        TRUSTED_STEP was hashed a moment ago by this process, so it counts as verified without
        reading it back; older ones are only verified when every newer one is bad.
        """
        if self.rank != 0:
            return []
        committed = self.committed()
        keep = self.retained([s for s, _ in committed])
        for step, path in reversed(committed):
            if step == trusted_step or not mf.verify(path):
                keep.add(step)
                break
        removed = []
        for step, path in committed:
            if step in keep:
                continue
            if not os.access(path, os.R_OK | os.X_OK):  # unreadable: evidence for a person, not ours to delete
                self.quarantine(path)
                continue
            trash = self.root / f"{TRASH_PREFIX}{path.name}-{os.getpid()}"
            os.rename(path, trash)  # gone from the listing at once; a crash mid-delete leaves only trash
            shutil.rmtree(trash, ignore_errors=True)
            removed.append((step, path))
        return removed


def _marked_or_unreadable(folder: Path) -> bool:
    """COMMITTED is there, or the folder cannot be read at all (retention then moves it to quarantine/)."""
    try:
        return (folder / mf.COMMITTED).is_file()
    except OSError:
        return True


def _rename_keeping_mode(src: Path, dest: Path) -> None:
    """Move a folder to another parent; one without write access (mode 000) is opened for the move only.

    Moving a directory to a new parent rewrites its ``..`` entry, so it needs write access to the
    folder itself. The owner may always chmod it; the original mode is put back afterwards.
    """
    try:
        os.rename(src, dest)
        return
    except PermissionError:
        mode = src.stat().st_mode & 0o7777
        os.chmod(src, mode | 0o700)
    try:
        os.rename(src, dest)
    finally:
        os.chmod(dest if dest.exists() else src, mode)
