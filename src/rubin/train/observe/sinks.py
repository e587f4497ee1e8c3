"""Where metrics go. JSONL in the run dir always; TensorBoard, MLflow and W&B when installed and asked for.

An external sink is a convenience, never a reason to lose a run: one that cannot start is a
one-line error before training, and one that fails later is reported once (as a warning event and
a line) and dropped, while metrics.jsonl carries on. Its errors often quote a tracking URI, so they
go through ``rubin.redact`` first.
"""

from __future__ import annotations

from rubin.errors import RubinError, UsageError
from rubin.redact import redact, redact_obj


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
        try:
            self.active = mlflow.start_run(run_name=run.path.name)
        except Exception as err:  # noqa: BLE001 - any failure of the tracking server: one line, secrets redacted
            raise RubinError(
                f"telemetry sink mlflow could not start a run ({type(err).__name__}: {_first_line(err)}); "
                "check MLFLOW_TRACKING_URI and its credentials, or remove mlflow from telemetry.sinks"
            ) from None
        flat = {}  # params: a flat view of the config, as strings (credentials in it never leave the machine)
        for sec, val in redact_obj(config_dict).items():
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


_NEEDS = {"tensorboard": ("torch.utils.tensorboard", "tensorboard"), "mlflow": ("mlflow", "mlflow"), "wandb": ("wandb", "wandb")}


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


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return redact(text[0][:300]) if text else ""


class Guarded:
    """Wraps an external sink: its first failure is reported once (redacted) and the sink is dropped."""

    def __init__(self, name: str, sink, run, warn):
        self.name, self.sink, self.run, self.warn, self.failed = name, sink, run, warn, False

    def _call(self, method: str, *args) -> None:
        if self.failed:
            return
        try:
            getattr(self.sink, method)(*args)
        except Exception as err:  # noqa: BLE001 - a metrics server going away must not stop training
            self.failed = True
            msg = f"telemetry sink {self.name} failed ({type(err).__name__}: {_first_line(err)}); it is off for the rest of the run"
            self.run.event("warning", message=msg)
            self.warn(msg)

    def metrics(self, row: dict) -> None:
        self._call("metrics", row)

    def eval(self, row: dict) -> None:
        self._call("eval", row)

    def close(self) -> None:
        self._call("close")


def build_sinks(names, run, config_dict, *, warn) -> list:
    """The JSONL sink plus the external ones named; WARN takes the line saying one failed and was dropped."""
    sinks = [JsonlSink(run)]
    if not run.is_writer:
        return []
    for name in names:
        if name == "tensorboard":
            sinks.append(Guarded(name, TensorBoardSink(run), run, warn))
        elif name == "mlflow":
            sinks.append(Guarded(name, MlflowSink(run, config_dict), run, warn))
        elif name == "wandb":
            from rubin.train.observe.wandb_sink import WandbSink

            sinks.append(Guarded(name, WandbSink(run, config_dict, _scalars), run, warn))
    return sinks
