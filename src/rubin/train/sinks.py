"""Where metrics go. JSONL in the run dir always; TensorBoard and MLflow when installed and asked for."""

from __future__ import annotations

from rubin.errors import UsageError


def _scalars(row: dict, prefix: str = "") -> dict[str, float]:
    out = {}
    for k, v in row.items():
        if k == "step":
            continue
        if isinstance(v, dict):
            out.update(_scalars(v, f"{prefix}{k}/"))
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and v is not None:
            out[f"{prefix}{k}"] = float(v)
    return out


class JsonlSink:
    def __init__(self, run):
        self.run = run

    def metrics(self, row: dict) -> None:
        self.run.log_metrics(row)

    def eval(self, row: dict) -> None:
        self.run.log_eval(row)

    def close(self) -> None:
        pass


class TensorBoardSink:
    def __init__(self, run):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise UsageError(
                "telemetry.sinks contains 'tensorboard' but tensorboard is not installed; "
                "pip install 'rubin[tensorboard]' or remove it from telemetry.sinks"
            ) from None
        self.writer = SummaryWriter(log_dir=str(run.path / "tensorboard"))

    def metrics(self, row: dict) -> None:
        for k, v in _scalars(row, "train/").items():
            self.writer.add_scalar(k, v, row["step"])
        self.writer.flush()

    def eval(self, row: dict) -> None:
        for k, v in _scalars(row, "eval/").items():
            self.writer.add_scalar(k, v, row["step"])
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class MlflowSink:
    def __init__(self, run, config_dict: dict):
        try:
            import mlflow
        except ImportError:
            raise UsageError(
                "telemetry.sinks contains 'mlflow' but mlflow is not installed; "
                "pip install 'rubin[mlflow]' or remove it from telemetry.sinks"
            ) from None
        import os

        self.mlflow = mlflow
        if not os.environ.get("MLFLOW_TRACKING_URI"):
            # Without a server, log next to the run rather than into whatever dir we were started from:
            # sqlite when the full mlflow is installed, else MLflow's file store (which MLflow 3 keeps
            # behind an opt-in flag; mlflow-skinny has no database backend).
            try:
                import sqlalchemy  # noqa: F401

                mlflow.set_tracking_uri(f"sqlite:///{(run.path / 'mlflow.db').resolve()}")
            except ImportError:
                os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
                mlflow.set_tracking_uri((run.path / "mlruns").resolve().as_uri())
        self.active = mlflow.start_run(run_name=run.path.name)
        flat = {}  # params: a flat view of the config, as strings
        for sec, val in config_dict.items():
            if isinstance(val, dict):
                for k, v in val.items():
                    flat[f"{sec}.{k}"] = str(v)[:250]
            else:
                flat[sec] = str(val)
        mlflow.log_params(flat)

    def metrics(self, row: dict) -> None:
        self.mlflow.log_metrics(_scalars(row), step=int(row["step"]))

    def eval(self, row: dict) -> None:
        self.mlflow.log_metrics({f"eval_{k}": v for k, v in _scalars(row).items()}, step=int(row["step"]))

    def close(self) -> None:
        self.mlflow.end_run()


_NEEDS = {"tensorboard": ("torch.utils.tensorboard", "tensorboard"), "mlflow": ("mlflow", "mlflow")}


def require(names) -> None:
    """Fail before the run dir is touched when a requested sink's package is missing."""
    for name in names:
        if name in _NEEDS:
            module, extra = _NEEDS[name]
            try:
                __import__(module)
            except ImportError:
                raise UsageError(
                    f"telemetry.sinks contains {name!r} but {extra} is not installed; "
                    f"pip install 'rubin[{extra}]' or remove it from telemetry.sinks"
                ) from None


def build_sinks(names, run, config_dict) -> list:
    sinks = [JsonlSink(run)]
    if not run.is_writer:
        return []
    for name in names:
        if name == "tensorboard":
            sinks.append(TensorBoardSink(run))
        elif name == "mlflow":
            sinks.append(MlflowSink(run, config_dict))
    return sinks
