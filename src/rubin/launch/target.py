"""What a launch target is: a module of ``rubin.launch`` with the names of ``Target``.

A module meets the protocol by its module-level names, as ``local``, ``slurm``, ``k8s``, ``azureml``
and ``skypilot`` do; one line in ``targets.py`` lists it, and ``rubin launch``'s choices come from
that table.
"""

from __future__ import annotations

from typing import Callable, Protocol, runtime_checkable

from rubin.launch.job import Job, Launched


@runtime_checkable
class Target(Protocol):
    NAME: str  # the TARGET argument of `rubin launch`
    EXTENSION: str  # of the job file it writes
    # The job runs in containers on machines of their own: it does not see this machine's files, so
    # paths stay as the config gives them and a run dir shared by several nodes must be a mount.
    CONTAINER: bool
    SECRETS_FROM_SHELL: bool  # secret values come from the submitting shell's environment (else from the target's store)
    SUBMIT: str | None  # the program that takes the job file; None: rubin runs the job itself
    INSTALL: str  # how to install SUBMIT, for the error when it is missing

    def check(self, job: Job, cfg, env: dict) -> None:
        """Raise a UsageError for anything this target cannot run, before a file is written."""

    def render(self, job: Job) -> str:
        """The job file's text."""

    def submit(self, job: Job, text: str, out: str | None, env: dict, say: Callable[..., None]) -> Launched:
        """Hand the job file (TEXT, also written to OUT when given) to the target, or run it."""
