"""Helpers for the report tests."""

from __future__ import annotations

from pathlib import Path


def all_inputs(inputs) -> list[Path]:
    return [inputs[k] for k in ("run", "bench", "verify", "env", "doctor", "compare", "plan")]
