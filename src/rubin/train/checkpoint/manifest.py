"""A checkpoint folder's files: each written durably (fsync), hashed into MANIFEST.json, sealed by
COMMITTED, and the check that a folder is whole.

Files are fsynced before the commit, so once every rank has passed the commit barrier the bytes are
on disk, not only in the page cache. A step folder counts only when COMMITTED exists, records the
sha256 of MANIFEST.json, and every file the manifest lists is there with its recorded size and
sha256. The manifest walks the folder recursively, so DCP shard folders are covered like single files.

The sha256 sums catch damage, not tampering (whoever can edit a file can recompute them). So a
folder also counts only if its pickles are plain data (checked by ``safe_load``) and, when
``$RUBIN_CHECKPOINT_KEY`` is set, if COMMITTED carries the HMAC of the manifest under that key.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import time
from pathlib import Path

from rubin.errors import RubinError
from rubin.train.checkpoint import safe_load

MANIFEST = "MANIFEST.json"
COMMITTED = "COMMITTED"
DONE_PREFIX = ".done-rank-"  # async commit coordination markers; never part of a checkpoint
FORMAT_VERSION = 1
KEY_ENV = "RUBIN_CHECKPOINT_KEY"

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


def payload_files(folder: Path) -> list[str]:
    """Relative POSIX paths of every file under FOLDER except the manifest, marker and done files."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for name in sorted(filenames):
            rel = Path(dirpath, name).relative_to(folder).as_posix()
            if rel in (MANIFEST, COMMITTED) or name.startswith(DONE_PREFIX):
                continue
            out.append(rel)
    return out


def build(folder: Path, step: int, meta: dict, *, world_size: int) -> dict:
    """Hash (and fsync) every payload file; the manifest as a dict.

    The one place that writes a checkpoint's metadata: format, step, versions and world size here; what
    only the caller knows (strategy, config hash, environment) comes in META."""
    files = {}
    total = 0
    for rel in payload_files(folder):
        digest, size = sha256_file(folder / rel, fsync=True)
        files[rel] = {"sha256": digest, "bytes": size}
        total += size
    for dirpath, _, _ in os.walk(folder):  # new files' directory entries must survive a power cut too
        fsync_dir(Path(dirpath))
    head = {k: v for k, v in meta.items() if k not in ("files", "bytes")}
    head.update(format_version=FORMAT_VERSION, step=int(step), time=time.time(), world_size=int(world_size), **_versions())
    head["bytes"] = total
    head["files"] = files
    return head


def _versions() -> dict:
    from rubin import __version__

    out = {"rubin_version": __version__}
    try:
        import torch

        out["torch_version"] = torch.__version__
    except ImportError:  # pragma: no cover - torch is a hard dependency of training
        pass
    return out


def write(folder: Path, manifest: dict) -> str:
    """Write MANIFEST.json durably; returns its sha256 (recorded in COMMITTED)."""
    data = (json.dumps(manifest, indent=1, sort_keys=True, default=str) + "\n").encode()
    write_durable(folder / MANIFEST, data)
    return hashlib.sha256(data).hexdigest()


def write_marker(folder: Path, step: int, manifest_sha256: str) -> None:
    marker = {"step": int(step), "manifest_sha256": manifest_sha256, "time": time.time()}
    key = signing_key()
    if key is not None:
        marker["hmac_sha256"] = _sign(key, (folder / MANIFEST).read_bytes())
    data = json.dumps(marker).encode()
    write_durable(folder / COMMITTED, data + b"\n")
    fsync_dir(folder)


def signing_key() -> bytes | None:
    """The key in ``$RUBIN_CHECKPOINT_KEY`` (kept outside the run dir), or None: checkpoints are then unsigned."""
    key = os.environ.get(KEY_ENV, "")
    return key.encode() if key else None


def _sign(key: bytes, manifest: bytes) -> str:
    return hmac.new(key, manifest, hashlib.sha256).hexdigest()


def signature_problems(marker, manifest: bytes) -> list[str]:
    """With a key set, a checkpoint counts only if COMMITTED carries the HMAC of its manifest under that key.

    Anyone who can write the folder can recompute a plain sha256, but not an HMAC without the key.
    """
    key = signing_key()
    if key is None:
        return []
    sig = marker.get("hmac_sha256") if isinstance(marker, dict) else None
    if not isinstance(sig, str):
        return [f"not signed, and {KEY_ENV} is set: this job only trusts checkpoints it signed"]
    if not hmac.compare_digest(sig, _sign(key, manifest)):
        return [f"signature does not match under {KEY_ENV} (tampered with, or signed with another key)"]
    return []


def read(folder: Path) -> dict | None:
    if not (Path(folder) / MANIFEST).is_file():
        return None
    try:
        with open(Path(folder) / MANIFEST, "rb") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def verify(folder: Path, *, hashes: bool = True) -> list[str]:
    """Problems that stop FOLDER from counting as a checkpoint; [] when it verifies.

    Any error while reading (permissions, I/O, garbage) is a problem in the list, never an
    exception: a checkpoint that cannot be read is invalid and resume falls back past it.
    """
    try:
        return _verify(Path(folder), hashes)
    except OSError as err:
        return [f"unreadable: {err.strerror or err}{f' ({err.filename})' if err.filename else ''}"]


def _verify(folder: Path, hashes: bool) -> list[str]:
    if not folder.is_dir():
        return [f"{folder} is not a directory"]
    problems: list[str] = []
    recorded, marker = None, None
    for name in (COMMITTED, MANIFEST):  # a FIFO in their place would block the read forever
        if (folder / name).exists() and not (folder / name).is_file():
            return [f"{name} is not a regular file"]
    try:
        marker = json.loads((folder / COMMITTED).read_bytes())
        recorded = marker.get("manifest_sha256") if isinstance(marker, dict) else None
        if not isinstance(recorded, str):
            problems.append("COMMITTED marker is not valid")
    except FileNotFoundError:
        problems.append("COMMITTED marker missing: the save never finished")
    except (OSError, ValueError) as err:
        problems.append(f"COMMITTED marker is unreadable ({getattr(err, 'strerror', None) or type(err).__name__})")
    try:
        raw = (folder / MANIFEST).read_bytes()
    except FileNotFoundError:
        problems.append("MANIFEST.json missing")
        return problems
    if recorded and hashlib.sha256(raw).hexdigest() != recorded:
        problems.append("MANIFEST.json does not match the hash recorded in COMMITTED (edited or corrupted)")
    try:
        files = json.loads(raw)["files"]
    except (ValueError, KeyError, TypeError):
        files = None
    if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
        problems.append("MANIFEST.json is not a valid manifest")
        return problems
    problems += _step_problems(folder, raw, marker)
    for rel, info in sorted(files.items()):
        p = folder / rel
        if not p.is_file():
            problems.append(f"{rel}: {_not_a_file(p)}")
            continue
        size = p.stat().st_size
        if size != info.get("bytes"):
            problems.append(f"{rel}: {size} bytes, the manifest says {info.get('bytes')} (truncated or overwritten)")
            continue
        if hashes and sha256_file(p)[0] != info.get("sha256"):
            problems.append(f"{rel}: sha256 differs from the manifest (corrupted)")
    extra = [rel for rel in payload_files(folder) if rel not in files]
    if extra:
        problems.append(f"files not in the manifest: {', '.join(extra[:5])} (added after the commit)")
    if (folder / "dcp").is_dir():  # the pickles a resume would read must be plain data (see safe_load)
        problems += safe_load.check(folder / "dcp")
    if hashes:
        problems += safe_load.pickle_problems(folder, files)
    problems += signature_problems(marker, raw)
    return problems


def _not_a_file(p: Path) -> str:
    """Why P, listed in the manifest, is not a regular file: missing is one reason among several."""
    import stat

    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        return "a symlink to a missing file" if p.is_symlink() else "missing"
    kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    return f"is {kind}, not the regular file that was saved"


def _step_problems(folder: Path, manifest_raw: bytes, marker) -> list[str]:
    """A ``step-N`` folder must hold step N: a renamed folder would resume from the wrong step."""
    import re

    m = re.fullmatch(r"step-(\d{8,})", folder.name)
    if not m:
        return []
    named = int(m.group(1))
    try:
        recorded = json.loads(manifest_raw).get("step")
    except (ValueError, AttributeError):
        recorded = None
    if isinstance(marker, dict) and isinstance(marker.get("step"), int) and recorded is None:
        recorded = marker["step"]
    if isinstance(recorded, int) and recorded != named:
        return [f"holds step {recorded} but is named {folder.name} (renamed or copied): rename it back to "
                f"step-{recorded:08d}"]
    return []
