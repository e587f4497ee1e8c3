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
    try:
        return _locate(p)
    except PermissionError as err:  # mode 000 or another user's folder: one line, not a crash
        where = err.filename or str(p)
        raise UsageError(f"RUN_OR_CKPT_DIR={str(path)!r} cannot be read: permission denied on {str(where)!r}; "
                         "run as the user who owns it, or give yourself read access (chmod u+rx)") from None


def _locate(p: Path) -> tuple[Path, Path | None]:
    path = p
    if not p.is_dir():
        what = "not a directory" if p.exists() else "no such directory"
        raise UsageError(f"RUN_OR_CKPT_DIR={str(path)!r} is not valid: {what}; "
                         "pass a run dir, its checkpoints/ or a step-NNNNNNNN folder")
    if STEP_RE.match(p.name) or (p / mf.MANIFEST).exists() or (p / mf.COMMITTED).exists():
        return p.parent, p
    if (p / "checkpoints").is_dir():
        return p / "checkpoints", None
    return p, None


def _is_dir(p: Path) -> bool:
    try:
        return p.is_dir()
    except OSError:
        return False


def _entry(path: Path, *, hashes: bool) -> dict:
    m = STEP_RE.match(path.name)
    try:
        man = mf.read(path) or {}
    except OSError:  # an unreadable step folder: verify names the problem below
        man = {}
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
    try:
        names = [] if single else sorted(p.name for p in root.iterdir())
    except PermissionError:
        raise UsageError(f"RUN_OR_CKPT_DIR={str(path)!r} cannot be read: permission denied on {str(root)!r}; "
                         "run as the user who owns it, or give yourself read access (chmod u+rx)") from None
    folders = [single] if single else [root / n for n in names if STEP_RE.match(n) and _is_dir(root / n)]
    entries = [_entry(p, hashes=hashes) for p in folders]
    valid = [e["step"] for e in entries if e["valid"]]  # with hashes=False: sizes only, not a resume decision
    unfinished = [n for n in names if n.startswith(TMP_PREFIX)]
    return {
        "version": SCHEMA_VERSION,
        "root": str(root),
        "checkpoints": entries,
        "hashed": hashes,
        "latest_valid": max(valid) if valid and hashes else None,
        "unfinished": unfinished,
        "ok": bool(entries) and all(e["valid"] for e in entries),
    }
