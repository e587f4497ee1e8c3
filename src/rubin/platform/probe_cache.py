"""A small on-disk cache for facts that are slow to get and only change when the software does.

The torch subprocess of the software probe (import torch, cuDNN and NCCL versions, the arch list,
CUDA availability) costs 1-6 s on a GPU node, most of the doctor's time. Its answer depends only on
the Python, the torch install, the driver and the GPUs visible, so it is kept under a key made of
those (``key()``), and a change to any of them misses the cache. Only healthy answers are stored:
a machine with a problem is asked again every time. The cache is one JSON file per key in
``$RUBIN_CACHE_DIR`` (default ``~/.cache/rubin``); ``RUBIN_CACHE_DIR=off`` turns it off.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

VERSION = 1


def default_dir(env) -> Path | None:
    raw = env.get("RUBIN_CACHE_DIR")
    if raw == "off":
        return None
    if raw:
        return Path(raw)
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rubin"


def key(*parts) -> str:
    """A stable hash of the parts (strings, numbers, None), with the cache format and Python in it."""
    text = json.dumps([VERSION, sys.executable, *parts], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def load(folder: Path | None, name: str, k: str) -> dict | None:
    if folder is None:
        return None
    try:
        doc = json.loads((folder / f"{name}-{k}.json").read_text())
    except (OSError, ValueError):
        return None
    return doc.get("value") if isinstance(doc, dict) and doc.get("key") == k else None


def store(folder: Path | None, name: str, k: str, value: dict) -> None:
    """Write atomically (a reader never sees half a file); a read-only home is not an error."""
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{name}-{k}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"key": k, "stored_at": time.time(), "value": value}))
        os.replace(tmp, folder / f"{name}-{k}.json")
    except OSError:
        pass
