"""Every sink writes what it claims: JSONL always, TensorBoard and MLflow when asked."""

import json
import sys

from trainhelp import mlp_args
from utils import invoke


def test_tensorboard_and_mlflow_sinks_receive_the_metrics(tmp_path, monkeypatch):
    # Empty: the sink picks its own store next to the run. mlflow.set_tracking_uri exports the variable
    # process-wide; monkeypatch puts the original state back at teardown.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # what the sink sets for its local store
    run = tmp_path / "run"
    r = invoke(["train", "--quiet", *mlp_args(run, 6, "telemetry.sinks=[jsonl, tensorboard, mlflow]", "telemetry.log_every_steps=2")])
    assert r.exit_code == 0, r.stderr
    jsonl = [json.loads(l) for l in open(run / "metrics.jsonl")]
    assert [row["step"] for row in jsonl] == [2, 4, 6]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    loss = acc.Scalars("train/loss")
    assert [e.step for e in loss] == [2, 4, 6]
    assert abs(loss[-1].value - jsonl[-1]["loss"]) < 1e-6
    assert "train/time/data_s" in acc.Tags()["scalars"]
    assert "eval/accuracy" in acc.Tags()["scalars"]

    import mlflow

    db = run / "mlflow.db"  # sqlite when SQLAlchemy is installed (full mlflow), else the file store
    mlflow.set_tracking_uri(f"sqlite:///{db.resolve()}" if db.exists() else (run / "mlruns").resolve().as_uri())
    runs = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert len(runs) == 1
    client = mlflow.tracking.MlflowClient()
    hist = client.get_metric_history(runs[0].info.run_id, "loss")
    assert [m.step for m in hist] == [2, 4, 6]
    assert abs(hist[-1].value - jsonl[-1]["loss"]) < 1e-6
    assert runs[0].data.params["optim.name"] == "adamw"
    assert client.get_metric_history(runs[0].info.run_id, "eval_accuracy")


def test_missing_sink_package_is_a_clear_error(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_tb(name, *a, **k):
        if name.startswith("torch.utils.tensorboard"):
            raise ImportError("no tensorboard")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_tb)
    monkeypatch.delitem(sys.modules, "torch.utils.tensorboard", raising=False)
    r = invoke(["train", "--quiet", *mlp_args(tmp_path / "run", 2, "telemetry.sinks=[tensorboard]")])
    assert r.exit_code == 2
    assert "pip install 'rubin[tensorboard]'" in r.stderr
    assert not (tmp_path / "run").exists()  # found before the run dir was made
