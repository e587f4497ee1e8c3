"""A cached index of an image-folder tree, so a restart doesn't list every file again.

Listing a million files on a network mount takes minutes (the seeds saw a 47-second start).
The index is written once, next to the data when that is writable, else in the cache dir, and
reused while every directory's mtime is unchanged: adding, removing or renaming a file changes
its directory's mtime, so a warm start costs one stat per directory and no listing at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Optional

from rubin.errors import UsageError

VERSION = 1
# The index lives in a hidden folder inside the data root: rewriting a file there changes only
# that folder's mtime, never the root's, so the cache doesn't invalidate itself.
INDEX_DIR = ".rubin"
INDEX_NAME = "image-index.json"
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm")
# A directory changed this close to the listing may have changed again within the same mtime
# tick (git's "racy" problem); such an index is rebuilt on the next start instead of trusted.
RACY_S = 2.0


def cache_locations(root: Path, cache_dir: Optional[str]) -> list[Path]:
    places = [root / INDEX_DIR / INDEX_NAME]
    if cache_dir:
        digest = hashlib.sha256(str(root).encode()).hexdigest()[:16]
        places.append(Path(cache_dir) / f"image-index-{digest}.json")
    return places


def load_index(root: Path, cache_dir: Optional[str] = None) -> dict:
    """``{"classes": [...], "samples": [[relpath, class_index], ...], ...}`` for ``root``."""
    root = root.resolve()
    for place in cache_locations(root, cache_dir):
        index = _read_valid(place, root)
        if index is not None:
            index["cache"] = str(place)
            return index
    created = _make_index_dir(root)
    index = build_index(root)
    if created:
        # Our own mkdir just changed the root's mtime; that change is not a racy one.
        index["trusted"] = [""]
    index["cache"] = _write(index, cache_locations(root, cache_dir))
    return index


def _make_index_dir(root: Path) -> bool:
    """Create root/.rubin before listing (so the listing sees the root's final mtime).
    True if this call created it; False if it existed or the root is not writable."""
    try:
        (root / INDEX_DIR).mkdir()
        return True
    except OSError:
        return False


def build_index(root: Path) -> dict:
    """List ``root/<class>/**/<image>`` once (the only function here that lists directories)."""
    started = time.time()
    dirs: dict[str, int] = {"": os.stat(root).st_mtime_ns}
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    samples = []
    for ci, cls in enumerate(classes):
        stack = [cls]
        while stack:
            rel = stack.pop()
            dirs[rel] = os.stat(root / rel).st_mtime_ns
            found = []
            for entry in os.scandir(root / rel):
                if entry.name.startswith("."):
                    continue
                if entry.is_dir():
                    stack.append(f"{rel}/{entry.name}")
                elif entry.name.lower().endswith(IMAGE_EXTENSIONS):
                    found.append(f"{rel}/{entry.name}")
            samples.extend([f, ci] for f in sorted(found))
    if not samples:
        raise UsageError(f"data.path={str(root)!r} is not valid: no images found in root/<class>/<file> "
                         f"(looked for {', '.join(IMAGE_EXTENSIONS)}); point it at the folder holding the class folders")
    samples.sort()
    return {"version": VERSION, "root": str(root), "built_at": started, "dirs": dirs, "classes": classes,
            "samples": samples}


def _read_valid(place: Path, root: Path) -> Optional[dict]:
    try:
        with open(place) as f:
            index = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(index, dict) or index.get("version") != VERSION or index.get("root") != str(root):
        return None
    built = float(index.get("built_at", 0))
    trusted = set(index.get("trusted", ()))
    try:
        for rel, mtime in index["dirs"].items():
            now = os.stat(root / rel).st_mtime_ns
            if now != mtime or (rel not in trusted and built - now / 1e9 < RACY_S):
                return None
    except (OSError, KeyError, AttributeError):
        return None
    return index


def _write(index: dict, places: list[Path]) -> Optional[str]:
    """Write to the first place that takes it (atomically: temp file, then rename)."""
    for place in places:
        tmp = place.with_name(f"{place.name}.{os.getpid()}.tmp")
        try:
            place.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w") as f:
                json.dump(index, f, separators=(",", ":"))
            os.replace(tmp, place)
            return str(place)
        except OSError:
            try:
                tmp.unlink()
            except OSError:
                pass
    return None
