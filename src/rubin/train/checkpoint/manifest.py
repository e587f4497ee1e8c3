"""MANIFEST.json and the COMMITTED marker: what a step folder must hold to count.

A step folder counts only when COMMITTED exists, records the sha256 of MANIFEST.json, and
every file the manifest lists is there with its recorded size and sha256. The manifest walks
the folder recursively, so DCP shard folders (``dcp/__0_0.distcp``, ``dcp/.metadata``) are
covered the same way as single files.

The sha256 sums catch damage, not tampering (whoever can edit a file can recompute them). So a
folder also counts only if its pickles are plain data (``.pt`` under ``weights_only``, DCP metadata
through ``dcp_reader``) and, when ``$RUBIN_CHECKPOINT_KEY`` is set, if COMMITTED carries the HMAC of
the manifest under that key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
from pathlib import Path

from rubin.train.checkpoint.files import fsync_dir, sha256_file, write_durable

MANIFEST = "MANIFEST.json"
COMMITTED = "COMMITTED"
DONE_PREFIX = ".done-rank-"  # async commit coordination markers; never part of a checkpoint
FORMAT_VERSION = 1
KEY_ENV = "RUBIN_CHECKPOINT_KEY"


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


def _pickle_problems(folder: Path, files: dict) -> list[str]:
    """Each ``.pt`` file parses under ``weights_only`` (memory-mapped: tensor bytes are not read).

    The hashes only say the files are the ones committed; this says that loading them cannot run
    code, so ``checkpoint verify`` and resume agree on which checkpoints are usable.
    """
    import pickle

    import torch

    problems = []
    for rel in sorted(files):
        if not rel.endswith(".pt") or "/" in rel:
            continue
        if not (folder / rel).is_file():  # reported as missing already; a FIFO would block the open forever
            continue
        try:
            try:
                torch.load(folder / rel, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as err:
                if "mmap" not in str(err):
                    raise
                torch.load(folder / rel, map_location="cpu", weights_only=True)  # not a zip file: read it whole
        except pickle.UnpicklingError as err:
            from rubin.train.checkpoint.files import _refusal_reason

            problems.append(f"{rel}: holds a pickled object that is not plain data ({_refusal_reason(err)}): refusing to load it")
        except Exception as err:  # noqa: BLE001 - unreadable means invalid, never a crash
            problems.append(f"{rel}: unreadable ({type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else ''})")
    return problems


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
    if (folder / "dcp").is_dir():  # the pickles a resume would read must be plain data (see dcp_reader)
        from rubin.train.checkpoint import dcp_reader

        problems += dcp_reader.check(folder / "dcp")
    if hashes:
        problems += _pickle_problems(folder, files)
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
