"""The launch targets: the one table of them. ``rubin launch``'s TARGET choices and help come from it.

Adding a target is a module with the names of ``target.Target`` and one line here.
"""

from __future__ import annotations

from rubin.errors import bad_choice
from rubin.launch import azureml, k8s, local, skypilot, slurm
from rubin.launch.target import Target

TARGETS: dict[str, Target] = {t.NAME: t for t in (local, slurm, k8s, azureml, skypilot)}


def get(name: str) -> Target:
    if name not in TARGETS:
        raise bad_choice("TARGET", name, list(TARGETS), "e.g. rubin launch slurm train.yaml --dry-run")
    return TARGETS[name]
