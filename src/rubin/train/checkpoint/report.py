"""What ``rubin checkpoint verify|list`` reports: every step folder of a run, checked without training."""

from __future__ import annotations

from pathlib import Path

from rubin.errors import UsageError
from rubin.train.checkpoint import manifest as mf
from rubin.train.checkpoint.store import STEP_RE, TMP_PREFIX

SCHEMA_VERSION = 1


def locate(path: str | Path) -> tuple[Path, Path | None]:
    """(checkpoints root, single step folder or None) for a run dir, a checkpoints dir or one step folder."""
    p = Path(path)
    if not p.is_dir():
        what = "not a directory" if p.exists() else "no such directory"
        raise UsageError(f"RUN_OR_CKPT_DIR={str(path)!r} is not valid: {what}; "
                         "pass a run dir, its checkpoints/ or a step-NNNNNNNN folder")
    if STEP_RE.match(p.name) or (p / mf.MANIFEST).exists() or (p / mf.COMMITTED).exists():
        return p.parent, p
    if (p / "checkpoints").is_dir():
        return p / "checkpoints", None
    return p, None


def _entry(path: Path, *, hashes: bool) -> dict:
    m = STEP_RE.match(path.name)
    man = mf.read(path) or {}
    problems = mf.verify(path, hashes=hashes)  # never raises: an unreadable file is a problem in the list
    try:
        committed = (path / mf.COMMITTED).is_file()
    except OSError:
        committed = False
    return {
        "step": int(m.group(1)) if m else man.get("step"),
        "path": str(path),
        "committed": committed,
        "valid": not problems,
        "problems": problems,
        "bytes": man.get("bytes"),
        "files": len(man.get("files", {})),
        "world_size": man.get("world_size"),
        "strategy": man.get("strategy"),
        "torch_version": man.get("torch_version"),
    }


def inspect(path: str | Path, *, hashes: bool = True) -> dict:
    """Every step folder (or the one given), verified; plus unfinished tmp folders, which resume ignores."""
    root, single = locate(path)
    folders = [single] if single else sorted((p for p in root.iterdir() if STEP_RE.match(p.name) and p.is_dir()), key=lambda p: p.name)
    entries = [_entry(p, hashes=hashes) for p in folders]
    valid = [e["step"] for e in entries if e["valid"]]  # with hashes=False: sizes only, not a resume decision
    unfinished = [] if single else sorted(p.name for p in root.iterdir() if p.name.startswith(TMP_PREFIX))
    return {
        "version": SCHEMA_VERSION,
        "root": str(root),
        "checkpoints": entries,
        "hashed": hashes,
        "latest_valid": max(valid) if valid and hashes else None,
        "unfinished": unfinished,
        "ok": bool(entries) and all(e["valid"] for e in entries),
    }
