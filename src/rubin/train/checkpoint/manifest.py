"""MANIFEST.json and the COMMITTED marker: what a step folder must hold to count.

A step folder counts only when COMMITTED exists, records the sha256 of MANIFEST.json, and
every file the manifest lists is there with its recorded size and sha256. The manifest walks
the folder recursively, so DCP shard folders (``dcp/__0_0.distcp``, ``dcp/.metadata``) are
covered the same way as single files.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from rubin.train.checkpoint.files import fsync_dir, sha256_file, write_durable

MANIFEST = "MANIFEST.json"
COMMITTED = "COMMITTED"
DONE_PREFIX = ".done-rank-"  # async commit coordination markers; never part of a checkpoint
FORMAT_VERSION = 1


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


def build(folder: Path, step: int, meta: dict) -> dict:
    """Hash (and fsync) every payload file; the manifest as a dict."""
    files = {}
    total = 0
    for rel in payload_files(folder):
        digest, size = sha256_file(folder / rel, fsync=True)
        files[rel] = {"sha256": digest, "bytes": size}
        total += size
    for dirpath, _, _ in os.walk(folder):  # new files' directory entries must survive a power cut too
        fsync_dir(Path(dirpath))
    head = {"format_version": FORMAT_VERSION, "step": int(step), "time": time.time()}
    head.update(_versions())
    head.update({k: v for k, v in meta.items() if k not in ("files", "bytes")})
    head["step"] = int(step)
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
    data = json.dumps({"step": int(step), "manifest_sha256": manifest_sha256, "time": time.time()}).encode()
    write_durable(folder / COMMITTED, data + b"\n")
    fsync_dir(folder)


def read(folder: Path) -> dict | None:
    try:
        with open(Path(folder) / MANIFEST) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def verify(folder: Path, *, hashes: bool = True) -> list[str]:
    """Problems that stop FOLDER from counting as a checkpoint; [] when it verifies."""
    folder = Path(folder)
    if not folder.is_dir():
        return [f"{folder} is not a directory"]
    problems: list[str] = []
    marker = folder / COMMITTED
    recorded = None
    if not marker.is_file():
        problems.append("COMMITTED marker missing: the save never finished")
    else:
        try:
            recorded = json.loads(marker.read_text()).get("manifest_sha256")
        except (OSError, ValueError, AttributeError):
            problems.append("COMMITTED marker is unreadable")
    mpath = folder / MANIFEST
    if not mpath.is_file():
        problems.append("MANIFEST.json missing")
        return problems
    raw = mpath.read_bytes()
    if recorded and hashlib.sha256(raw).hexdigest() != recorded:
        problems.append("MANIFEST.json does not match the hash recorded in COMMITTED (edited or corrupted)")
    try:
        files = json.loads(raw)["files"]
    except (ValueError, KeyError, TypeError):
        files = None
    if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
        problems.append("MANIFEST.json is not a valid manifest")
        return problems
    for rel, info in sorted(files.items()):
        p = folder / rel
        if not p.is_file():
            problems.append(f"{rel}: missing")
            continue
        size = p.stat().st_size
        if size != info.get("bytes"):
            problems.append(f"{rel}: {size} bytes, the manifest says {info.get('bytes')} (truncated or overwritten)")
            continue
        if hashes and sha256_file(p)[0] != info.get("sha256"):
            problems.append(f"{rel}: sha256 differs from the manifest (corrupted)")
    return problems
