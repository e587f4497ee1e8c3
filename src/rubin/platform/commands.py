"""External commands (nvidia-smi, nvcc, dmesg, modinfo...) through one replaceable object.

Every probe that runs a program goes through ``commands.get().run(argv, timeout=...)``. A missing
program, a timeout or a permission error comes back as a ``CommandResult`` with ``error`` set,
never as an exception, so a probe can turn it into an "unknown" fact with the reason. Tests swap
the runner for a ``FakeRunner`` that replays recorded outputs (tests/fixtures/doctor/).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field

DEFAULT_TIMEOUT_S = 5.0


@dataclass
class CommandResult:
    argv: list[str]
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    error: str | None = None  # "not found", "timed out after 5s", ... (None when the program ran)
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.returncode == 0

    @property
    def output(self) -> str:
        """stdout and stderr together, the way a user sees them in a terminal."""
        return "\n".join(s for s in (self.stdout.strip(), self.stderr.strip()) if s)

    def reason(self) -> str:
        """One line saying why this command did not give a usable answer."""
        if self.error:
            return f"`{' '.join(self.argv)}`: {self.error}"
        first = (self.output.splitlines() or [""])[0].strip()
        return f"`{' '.join(self.argv)}` exited {self.returncode}" + (f": {first}" if first else "")


class Runner:
    """Runs real programs with a timeout. Subclass or replace it in tests."""

    def which(self, name: str) -> str | None:
        return shutil.which(name)

    def run(self, argv: list[str], timeout: float = DEFAULT_TIMEOUT_S, env: dict | None = None) -> CommandResult:
        argv = [str(a) for a in argv]
        t0 = time.perf_counter()
        if self.which(argv[0]) is None and not os.path.isfile(argv[0]):
            return CommandResult(argv, error="not found on PATH")
        try:
            proc = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, env=env, errors="replace",
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            return CommandResult(argv, stdout=out, error=f"timed out after {timeout:g}s",
                                 duration_s=time.perf_counter() - t0)
        except OSError as exc:  # permission denied, exec format error, ...
            return CommandResult(argv, error=f"{type(exc).__name__}: {exc.strerror or exc}",
                                 duration_s=time.perf_counter() - t0)
        return CommandResult(argv, proc.returncode, proc.stdout, proc.stderr, None, time.perf_counter() - t0)


@dataclass
class FakeRunner(Runner):
    """Replays recorded outputs. Keys are command lines (``"nvidia-smi topo -m"``) or program names.

    A value is a ``CommandResult``, a string (stdout of a successful run) or ``None`` (not installed).
    Unknown commands are "not found", as on a bare machine. ``calls`` records what was asked.
    """

    responses: dict = field(default_factory=dict)
    calls: list = field(default_factory=list)

    def _lookup(self, argv: list[str]):
        line = " ".join(argv)
        for key in (line, argv[0], os.path.basename(argv[0])):
            if key in self.responses:
                return True, self.responses[key]
        return False, None

    def which(self, name: str) -> str | None:
        found, value = self._lookup([name])
        if not found:
            found = any(k.split()[0] == name for k in self.responses)
            value = True
        return f"/usr/bin/{name}" if found and value is not None else None

    def run(self, argv, timeout: float = DEFAULT_TIMEOUT_S, env: dict | None = None) -> CommandResult:
        argv = [str(a) for a in argv]
        self.calls.append(argv)
        found, value = self._lookup(argv)
        if not found or value is None:
            return CommandResult(argv, error="not found on PATH")
        if isinstance(value, CommandResult):
            return CommandResult(argv, value.returncode, value.stdout, value.stderr, value.error)
        return CommandResult(argv, 0, str(value), "")


_runner: Runner = Runner()


def get() -> Runner:
    return _runner


def set_for_tests(runner: Runner | None) -> Runner:
    """Replace the runner (``None`` restores the real one); returns the previous runner."""
    global _runner
    previous = _runner
    _runner = runner if runner is not None else Runner()
    return previous


@contextlib.contextmanager
def override(runner: Runner):
    previous = set_for_tests(runner)
    try:
        yield runner
    finally:
        set_for_tests(previous)
