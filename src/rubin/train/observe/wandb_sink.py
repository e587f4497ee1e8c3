"""The Weights & Biases sink (``telemetry.sinks: [jsonl, wandb]``, ``pip install 'rubin[wandb]'``).

Rank 0 only: ``build_sinks`` makes external sinks on the run dir's writer alone. The run's files go
under ``<run dir>/wandb``; ``WANDB_MODE=offline`` keeps them there (``wandb sync`` uploads them later),
and the usual ``WANDB_*`` variables (project, entity, API key) apply. The config it uploads is the
resolved config with secrets redacted and without ``launch.env`` and ``launch.secrets``, whose values
are for the job's environment, not for a dashboard.
"""

from __future__ import annotations

import os

from rubin.errors import RubinError, UsageError
from rubin.redact import redact, redact_obj

DROPPED = {"launch": ("env", "secrets")}  # sections whose keys never leave the machine, even redacted


def uploaded_config(config_dict: dict) -> dict:
    """The config as W&B receives it: redacted, and without the launch environment and secret references."""
    cfg = redact_obj(config_dict)
    for section, keys in DROPPED.items():
        if isinstance(cfg.get(section), dict):
            cfg[section] = {k: v for k, v in cfg[section].items() if k not in keys}
    return cfg


class WandbSink:
    def __init__(self, run, config_dict: dict, scalars):
        try:
            import wandb
        except ImportError:
            raise UsageError("telemetry.sinks contains 'wandb' but wandb is not installed; "
                             "pip install 'rubin[wandb]' or remove it from telemetry.sinks") from None
        self.scalars, self.wandb = scalars, wandb
        (run.path / "wandb").mkdir(exist_ok=True)
        self._service_env = os.environ.get("WANDB_SERVICE")  # wandb.init points it at its service process
        try:
            self.active = wandb.init(project=os.environ.get("WANDB_PROJECT", "rubin"), name=run.path.name,
                                     dir=str(run.path), config=uploaded_config(config_dict),
                                     # no captured console, and no system metadata: it records the command
                                     # line, where a --set may carry a token
                                     settings=wandb.Settings(console="off", silent=True, x_disable_meta=True))
        except Exception as err:  # noqa: BLE001 - no server, no key, a bad entity: one line, secrets redacted
            first = (str(err).strip().splitlines() or [""])[0][:300]
            raise RubinError(f"telemetry sink wandb could not start a run ({type(err).__name__}: {redact(first)}); "
                             "check WANDB_API_KEY and WANDB_ENTITY, set WANDB_MODE=offline, or remove wandb from "
                             "telemetry.sinks") from None

    def metrics(self, row: dict) -> None:
        self.active.log({f"train/{k}": v for k, v in self.scalars(row).items()}, step=int(row["step"]))

    def eval(self, row: dict) -> None:
        self.active.log({f"eval/{k}": v for k, v in self.scalars(row).items()}, step=int(row["step"]))

    def close(self) -> None:
        self.active.finish()
        self.wandb.teardown()  # the service process ends with the run, not at interpreter exit
        if self._service_env is None:
            os.environ.pop("WANDB_SERVICE", None)
