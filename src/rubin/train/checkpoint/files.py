"""Single checkpoint files: durable writes, safe reads, hashing, and disk-full errors.

``save_file`` fsyncs before returning, so when every rank has passed the commit barrier the
bytes are on disk, not only in the page cache. ``load_file`` uses ``weights_only`` semantics:
a pickle that would import and call arbitrary code is refused before anything runs.
"""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

from rubin.errors import RubinError

# Errors that mean "no room": a full disk, a quota, or a file-size limit (RLIMIT_FSIZE gives EFBIG).
DISK_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def _disk_full_cause(err: BaseException | None) -> OSError | None:
    seen = 0
    while err is not None and seen < 20:  # torch wraps the OSError of a failed write in a RuntimeError
        if isinstance(err, OSError) and err.errno in DISK_FULL_ERRNOS:
            return err
        err, seen = err.__cause__ or err.__context__, seen + 1
    return None


def is_disk_full(err: BaseException) -> bool:
    return _disk_full_cause(err) is not None


def disk_full_error(path: Path, err: BaseException) -> RubinError:
    cause = _disk_full_cause(err)
    reason = (cause.strerror if cause is not None else None) or str(err)
    return RubinError(
        f"checkpoint write failed: disk full ({reason}) writing {path}: the partial checkpoint is discarded and the "
        "previous committed one is kept; free space on that disk, lower checkpoint.keep_last, or set run.dir elsewhere"
    )


def save_file(obj, path: str | os.PathLike) -> None:
    """``torch.save`` to PATH, then flush and fsync, so the commit that follows is durable."""
    import torch

    from rubin.train.faults import inject

    path = Path(path)
    try:
        if inject.ARMED:
            inject.maybe_disk_full(path)
        with open(path, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
    except (OSError, RuntimeError) as err:
        if is_disk_full(err):
            raise disk_full_error(path, err) from err
        raise


def _refusal_reason(err: BaseException) -> str:
    """The one informative line of torch's long weights_only message (e.g. 'Unsupported global: ...')."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    for ln in lines:
        if "Unsupported" in ln or "global" in ln.lower():
            return ln.rstrip(".")[:200]
    return (lines[0] if lines else type(err).__name__)[:200]


def load_file(path: str | os.PathLike, map_location="cpu"):
    """``torch.load(weights_only=True)``: tensors, containers and plain values only."""
    import pickle
    import zipfile

    import torch

    path = Path(path)
    if not path.is_file():
        raise RubinError(f"checkpoint file {path} is missing: the checkpoint is incomplete; resume from an earlier step")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        raise RubinError(
            f"checkpoint file {path} carries a pickled object that is not plain tensors/containers "
            f"({_refusal_reason(err)}): refusing to load it; nothing from it was run. "
            "Only load checkpoints you trust, and save plain state dicts"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError) as err:
        raise RubinError(
            f"checkpoint file {path} is unreadable ({str(err).splitlines()[0][:160] if str(err) else type(err).__name__}): "
            "it is truncated or corrupted; run `rubin checkpoint verify` on its folder and resume from an earlier step"
        ) from None


def sha256_file(path: Path, *, fsync: bool = False, chunk: int = 4 << 20) -> tuple[str, int]:
    """(hex sha256, size) of a file; with ``fsync`` also flush it to disk on the way."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                break
            h.update(block)
            size += len(block)
        if fsync:
            os.fsync(f.fileno())
    return h.hexdigest(), size


def write_durable(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    """Persist the directory entries (renames, new files) of PATH."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on a directory; the data files are synced anyway
        pass
    finally:
        os.close(fd)
