"""Checking builder arguments: unknown names and wrong types are one-line errors."""

from __future__ import annotations

import inspect
from typing import Callable

from rubin.errors import UsageError, bad_value, did_you_mean


def builder_args(builder: Callable, skip: tuple[str, ...]) -> dict[str, object]:
    """The keyword arguments a builder accepts, with their defaults (skipping ``skip``)."""
    params = inspect.signature(builder).parameters
    return {n: p.default for n, p in params.items()
            if n not in skip and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}


def check_args(field: str, owner: str, args: dict, allowed: dict[str, object]) -> None:
    """Reject names the builder doesn't take, and values whose type can't match the default's."""
    if not isinstance(args, dict):
        raise bad_value(field, args, "a mapping of argument names to values", f"e.g. --set {field}.NAME=VALUE")
    for name, value in args.items():
        if name not in allowed:
            listing = ", ".join(sorted(allowed)) or "none"
            raise UsageError(f"{field}.{name} is not an argument of {owner}{did_you_mean(name, allowed)}; "
                             f"allowed: {listing}")
        default = allowed[name]
        if value is None or default is None or default is inspect.Parameter.empty:
            continue
        if isinstance(default, bool):
            ok, kind = isinstance(value, bool), "true or false"
        elif isinstance(default, int):
            ok, kind = isinstance(value, int) and not isinstance(value, bool), "an integer"
        elif isinstance(default, float):
            ok, kind = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
        elif isinstance(default, str):
            ok, kind = isinstance(value, str), "a string"
        else:
            ok, kind = True, ""
        if not ok:
            shown = str(default).lower() if isinstance(default, bool) else default
            raise bad_value(f"{field}.{name}", value, f"{kind} (default {shown})",
                            f"e.g. --set {field}.{name}={shown}")


def positive_int(name: str, value, allow_zero: bool = False) -> int:
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise bad_value(name, value, f"an integer >= {low}", f"e.g. --set {name}={max(low, 1)}")
    return value


def fraction(name: str, value, low: float = 0.0, high: float = 1.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value < high:
        raise bad_value(name, value, f"a number in [{low}, {high})", f"e.g. --set {name}=0.2")
    return float(value)
