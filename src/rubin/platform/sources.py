"""Where the probes read from: one object holding the filesystem root, the environment, the command
runner and the NVML seam. Tests point ``root`` at a recorded tree (tests/fixtures/doctor/trees/...)
and swap the runner and NVML for fakes; production uses the real machine.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rubin.platform import commands
from rubin.platform import nvml as nvml_seam
from rubin.platform.facts import Fact, known, unknown


@dataclass
class Sources:
    root: str = "/"
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    runner: commands.Runner | None = None
    run_dir: str = "."
    timeout_s: float = 5.0  # per external command
    torch_timeout_s: float = 30.0  # the torch subprocess imports torch: slower than a command
    cache_dir: str | None = None  # the facts cache (probe_cache); by default only for the real machine

    def facts_cache_dir(self):
        """Where slow facts are cached: ``cache_dir`` when given, else the user's cache for the real
        machine (real runner, root "/"), else None: a fake or recorded machine never reads or writes it."""
        from pathlib import Path

        from rubin.platform import probe_cache

        if self.cache_dir is not None:
            return Path(self.cache_dir)
        if self.runner is None and self.root == "/":
            return probe_cache.default_dir(self.env)
        return None

    @property
    def commands(self) -> commands.Runner:
        return self.runner if self.runner is not None else commands.get()

    def nvml(self):
        return nvml_seam.get()

    def nvml_error(self) -> tuple[str | None, str | None]:
        return nvml_seam.load_error()

    def path(self, p: str) -> str:
        return os.path.join(self.root, p.lstrip("/"))

    def read(self, p: str) -> str:
        with open(self.path(p), errors="replace") as f:
            return f.read()

    def exists(self, p: str) -> bool:
        return os.path.exists(self.path(p))

    def listdir(self, p: str) -> list[str]:
        return sorted(os.listdir(self.path(p)))

    def run(self, argv: list[str], timeout: float | None = None):
        return self.commands.run(argv, timeout=self.timeout_s if timeout is None else timeout)


def guarded(source: str, fn: Callable[[], object]) -> Fact:
    """Run one probe step; any exception becomes an unknown fact with the reason, never a crash."""
    try:
        return known(fn(), source)
    except FileNotFoundError as exc:
        return unknown(f"{exc.filename or source} does not exist", source)
    except PermissionError as exc:
        return unknown(f"permission denied reading {exc.filename or source}", source)
    except Exception as exc:  # noqa: BLE001 - a probe must never crash the whole probe
        return unknown(f"{type(exc).__name__}: {exc}", source)
