"""Issue 26 item 2: the W&B sink, offline. The run's .wandb file is read back with wandb's own reader."""

from __future__ import annotations

import json

import pytest
from utils import invoke

wandb = pytest.importorskip("wandb")  # the [wandb] extra, part of [test]

TOKEN = "hf_plantedSecretValue0123456789abcdefXYZ"


def _records(run_dir):
    """Every record of the offline run, parsed with wandb's own protobuf types.

    wandb 0.31 dropped its Python reader (the Go core reads the file), so the container is read
    here: the LevelDB log format wandb documents, 32 KiB blocks of 7-byte-headed chunks.
    """
    import struct

    from wandb.proto import wandb_internal_pb2

    (path,) = list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    raw = path.read_bytes()
    assert raw[:4] == b":W&B"
    chunks, pending, pos, block = [], b"", 7, 32768
    while pos + 7 <= len(raw):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos:pos + 7])
        data, pos = raw[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:  # FULL
            chunks.append(data)
        elif kind in (2, 3):  # FIRST, MIDDLE
            pending = (b"" if kind == 2 else pending) + data
        elif kind == 4:  # LAST
            chunks.append(pending + data)
    out = []
    for data in chunks:
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(data)
        out.append(rec)
    return out


def test_offline_run_logs_metrics_and_a_config_without_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_PROJECT", "rubin-test")
    run = tmp_path / "run"
    sets = [f"run.dir={run}", "run.max_steps=6", "run.epochs=null", "model.name=mlp", "model.args={hidden: 16, depth: 1}",
            "data.name=synthetic", "data.args={num_samples: 128, features: 8, num_classes: 4}", "data.batch_size=16",
            "telemetry.log_every_steps=2", "telemetry.sinks=[jsonl, wandb]", "checkpoint.save_final=false",
            f"run.name=note-{TOKEN}", "launch.env={OMP_NUM_THREADS: '1'}"]
    r = invoke(["train", "--quiet", *[a for s in sets for a in ("--set", s)]])
    assert r.exit_code == 0, r.stderr
    records = _records(run)
    history = {}
    for rec in records:
        if rec.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item}
            history[items["_step"]] = items
    assert sorted(history) == [2, 4, 6]
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [history[row["step"]]["train/loss"] for row in logged] == pytest.approx([row["loss"] for row in logged])
    config = {}
    for rec in records:  # the config travels in the run record (and in config records for later changes)
        kind = rec.WhichOneof("record_type")
        if kind in ("run", "config"):
            update = rec.run.config.update if kind == "run" else rec.config.update
            config.update({i.key: json.loads(i.value_json) for i in update})
    assert config["model"]["name"] == "mlp" and config["telemetry"]["sinks"] == ["jsonl", "wandb"]
    assert "env" not in (config.get("launch") or {}) and "REDACTED" in json.dumps(config["run"])
    raw = b"".join(p.read_bytes() for p in (run / "wandb").rglob("*") if p.is_file())
    assert TOKEN.encode() not in raw


def test_missing_wandb_is_one_line_before_the_run_dir(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_wandb(name, *a, **k):
        if name == "wandb":
            raise ImportError("no wandb")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    run = tmp_path / "run"
    r = invoke(["train", "--quiet", "--set", f"run.dir={run}", "--set", "run.max_steps=2", "--set", "model.name=mlp",
                "--set", "data.name=synthetic", "--set", "telemetry.sinks=[jsonl, wandb]"])
    assert r.exit_code == 2 and "pip install 'rubin[wandb]'" in r.stderr and not run.exists()
