"""The results file: schema version, validation and a round trip through disk."""

import json
from pathlib import Path

import pytest
import torch

from rubin.bench import results, suites
from rubin.errors import UsageError


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("bench")
    ctx = suites.make_context("cpu", quick=True, workdir=Path(workdir))
    overrides = {"matmul": {"shapes": [[64, 64, 64]], "trials": 6, "warmup": 1},
                 "launch": {"kernels": 10, "trials": 6, "warmup": 1}}
    return suites.run(["matmul", "launch"], ctx, overrides)


def test_document_carries_version_env_device_and_method(doc):
    assert doc["schema_version"] == results.SCHEMA_VERSION and doc["kind"] == "rubin.bench.results"
    assert torch.__version__ in json.dumps(doc["env"])  # the env fingerprint is stored with the figures
    assert doc["device"]["type"] == "cpu" and doc["spec"] is None and doc["spec_match"]["key"] is None
    mm = doc["benchmarks"]["matmul"]
    assert mm["status"] == "ok" and mm["params"]["shapes"] == [[64, 64, 64]]
    assert "l2_flush" in mm["method"]
    row = mm["rows"][0]
    assert {"dtype", "m", "n", "k", "tflops"} <= set(row)
    assert {"median", "min", "max", "ci95"} <= set(row["tflops"])


def test_round_trip_through_disk_is_lossless(doc, tmp_path):
    path = results.save(doc, tmp_path / "r.json")
    back = results.load(path)
    assert back == json.loads(json.dumps(doc))


def _write(tmp_path, data):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return p


def test_newer_schema_is_refused_with_the_fix(doc, tmp_path):
    with pytest.raises(UsageError, match=r"schema_version=99 .*upgrade rubin"):
        results.load(_write(tmp_path, {**doc, "schema_version": 99}))


def test_other_json_is_refused(tmp_path):
    with pytest.raises(UsageError, match=r"kind=None"):
        results.load(_write(tmp_path, {"hello": 1}))
    with pytest.raises(UsageError, match=r"not valid JSON"):
        results.load(_write(tmp_path, "{not json"))
    with pytest.raises(UsageError, match=r"does not exist"):
        results.load(tmp_path / "missing.json")


def test_a_matmul_row_without_tflops_is_refused(doc, tmp_path):
    bad = json.loads(json.dumps(doc))
    del bad["benchmarks"]["matmul"]["rows"][0]["tflops"]
    with pytest.raises(UsageError, match=r"tflops"):
        results.load(_write(tmp_path, bad))


def test_a_failing_benchmark_becomes_an_error_entry_and_the_others_still_run(tmp_path, monkeypatch):
    from rubin.bench import kernel_launch as launch

    def boom(params, ctx):
        raise RuntimeError("device fell off the bus")

    monkeypatch.setattr(launch, "run", boom)
    ctx = suites.make_context("cpu", quick=True, workdir=tmp_path)
    doc = suites.run(["launch", "matmul"], ctx, {"matmul": {"shapes": [[32, 32, 32]], "trials": 2, "warmup": 0}})
    assert doc["benchmarks"]["launch"]["status"] == "error"
    assert "fell off the bus" in doc["benchmarks"]["launch"]["error"]
    assert doc["benchmarks"]["matmul"]["status"] == "ok"
