"""Pytest-free helpers for the hardening tests and ``benchmarks/adversarial.py``: tiny runs, attacks, damage."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def mlp_args(run_dir, steps: int = 8, *extra: str, every: int = 4) -> list[str]:
    """A tiny, deterministic MLP run that saves every EVERY steps (seconds on a CPU)."""
    sets = [
        f"run.dir={run_dir}", f"run.max_steps={steps}", "run.epochs=null", "model.name=mlp",
        "model.args={hidden: 16, depth: 1}", "data.name=synthetic", "data.args={num_samples: 256, features: 8, num_classes: 4}",
        "data.batch_size=32", "telemetry.log_every_steps=1", "run.deterministic=true", f"checkpoint.every_steps={every}",
        "checkpoint.keep_last=5", *extra,
    ]
    return [a for s in sets for a in ("--set", s)]


def rubin(args, *, env: dict | None = None, timeout: float = 300, cwd=None, stdin=None) -> subprocess.CompletedProcess:
    """``python -m rubin ARGS`` as a real process (its own session, so a stray signal stays inside)."""
    full = dict(os.environ)
    full["OMP_NUM_THREADS"] = "1"
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "rubin", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=full, cwd=cwd, stdin=stdin if stdin is not None else subprocess.DEVNULL)


def events(run_dir) -> list[dict]:
    from rubin.runs import read_jsonl

    return read_jsonl(Path(run_dir) / "events.jsonl")


def summary(run_dir) -> dict | None:
    p = Path(run_dir) / "summary.json"
    return json.loads(p.read_text()) if p.exists() else None


def step_dir(run_dir, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step-{step:08d}"


class Payload:
    """The attack from the issue: unpickling runs ``os.system`` that creates MARKER."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def recommit(folder: Path) -> None:
    """What an attacker with write access does after editing a step folder: recompute MANIFEST.json and COMMITTED."""
    from rubin.train.checkpoint import manifest as mf

    man = mf.read(folder) or {}
    step = int(man.get("step", 0))
    for name in (mf.MANIFEST, mf.COMMITTED):
        (folder / name).unlink(missing_ok=True)
    new = mf.build(folder, step, {k: v for k, v in man.items() if k not in ("files", "bytes", "step")},
                   world_size=int(man.get("world_size", 1)))
    key = os.environ.pop(mf.KEY_ENV, None)  # the attacker does not have the signing key
    try:
        mf.write_marker(folder, step, mf.write(folder, new))
    finally:
        if key is not None:
            os.environ[mf.KEY_ENV] = key


def plant_dcp_attack(folder: Path, marker: Path) -> None:
    """Turn a committed step folder into an "FSDP" one whose ``dcp/.metadata`` runs code when unpickled."""
    dcp = folder / "dcp"
    dcp.mkdir(exist_ok=True)
    (dcp / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    recommit(folder)


def alias_bomb(levels: int = 9) -> str:
    """A config whose model.args nests LEVELS lists of 9 aliases each: 9**LEVELS values once expanded."""
    lines = ["    l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "model:\n  name: mlp\n  args:\n" + "\n".join(lines) + "\n"


def unprivileged(argv: list[str]) -> list[str]:
    """ARGV run without the power to read past file modes: as root, drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH."""
    import shutil

    if os.geteuid() != 0:
        return argv
    if shutil.which("setpriv") is None:
        raise RuntimeError("running as root without setpriv: cannot test unreadable folders")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--", *argv]
