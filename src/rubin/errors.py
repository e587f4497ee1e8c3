"""Exit codes and the user-facing error type.

A user error is one line: the offending ``name=value``, what is allowed, and how to fix it.
The CLI boundary (``rubin.cli.main``) turns these into that line and the exit code below;
tracebacks only appear with ``--debug``.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1  # the command ran and failed (training diverged, a benchmark failed, ...)
    USAGE = 2  # bad arguments or config; nothing was touched
    PROBLEMS = 3  # doctor found errors / compare found a failing rule
    PREEMPTED = 75  # stopped on a signal after a committed checkpoint (EX_TEMPFAIL: requeue me)
    INTERRUPTED = 130  # Ctrl-C without a checkpoint


class RubinError(Exception):
    """An error meant for the user. ``str(err)`` is the whole message, one line."""

    exit_code: ExitCode = ExitCode.FAILURE

    def __init__(self, message: str, exit_code: ExitCode | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(RubinError, ValueError):
    """Bad input: arguments, config values, files. Exit code 2."""

    exit_code = ExitCode.USAGE


def bad_value(name: str, value: object, allowed: str, fix: str = "") -> UsageError:
    """Build the one-line error in the project's recipe: value, then allowed, then fix."""
    msg = f"{name}={value!r} is not valid: {allowed}"
    if fix:
        msg += f"; {fix}"
    return UsageError(msg)


def did_you_mean(word: str, choices) -> str:
    """' (did you mean 'x'?)' for the closest choice, or ''."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""
