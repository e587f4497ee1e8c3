"""Issue 16 item 2: a credential planted in each path that echoes input never comes out."""

from __future__ import annotations

import json
import os

import pytest
from hardkit import mlp_args, rubin
from utils import invoke

from rubin.redact import MASK, redact, redact_obj
from rubin.runs import RunDir

SAS = "https://acct.blob.core.windows.net/data/train?sv=2022-11-02&se=2031-01-01T00%3A00Z&sp=r&sig=SECRETSIG%2Babc%3D"


@pytest.mark.parametrize("text,secret,kept", [
    (SAS, "SECRETSIG", "https://acct.blob.core.windows.net/data/train?sv=2022-11-02"),
    ("s3://b/k?X-Amz-Algorithm=AWS4&X-Amz-Credential=AKIAXX%2F2024&X-Amz-Signature=abc123def", "abc123def", "X-Amz-Algorithm=AWS4"),
    ("mlflow at https://user:SECRETPW@mlflow.example.com:5000/api failed", "SECRETPW", "https://user:REDACTED@mlflow.example.com:5000"),
    ("git https://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/o/r", "ghp_abcdefghij", "@github.com/o/r"),
    ("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyzABCD given", "hf_abcdefghij", "given"),
    ("key AKIAIOSFODNN7EXAMPLE in env", "AKIAIOSFODNN7EXAMPLE", "in env"),
    ("Authorization: Bearer eyJhbGciOi.eyJzdWIiOi.SflKxwRJSM", "eyJhbGciOi", "Authorization: Bearer"),
    ("DefaultEndpointsProtocol=https;AccountName=a;AccountKey=c2VjcmV0a2V5==;EndpointSuffix=core", "c2VjcmV0a2V5", "AccountName=a"),
    ("https://host/x?token=tok123&page=2", "tok123", "page=2"),
])
def test_redact_hides_the_secret_and_keeps_the_shape(text, secret, kept):
    out = redact(text)
    assert secret not in out and MASK in out and kept in out


@pytest.mark.parametrize("text", [
    "expected section.key=value, e.g. --set optim.lr=1e-3",
    "run.seed=3 is not valid: input should be less than 10",
    "data.path='/data/imagenet/train' does not exist",
    "https://download.pytorch.org/whl/cu124",
])
def test_redact_leaves_ordinary_messages_alone(text):
    assert redact(text) == text


def test_redact_obj_masks_secret_named_keys():
    out = redact_obj({"data": {"args": {"sas_token": "sv=1&x", "url": SAS, "n": 3, "password": "pw"}}})
    assert out["data"]["args"]["sas_token"] == MASK and out["data"]["args"]["password"] == MASK
    assert "SECRETSIG" not in out["data"]["args"]["url"] and out["data"]["args"]["n"] == 3


def test_bad_data_path_with_a_sas_url_is_redacted_on_stderr(tmp_path):
    r = invoke(["train", "--quiet", *mlp_args(tmp_path / "run", 4, "data.name=cifar10", "data.args={}", f"data.path={SAS}")])
    assert r.exit_code == 2 and "data.path=" in r.stderr
    assert "SECRETSIG" not in r.stderr and "sig=REDACTED" in r.stderr


def test_internal_errors_are_redacted_at_the_boundary(monkeypatch):
    import rubin.cli.env as env_cmd

    def boom(args):
        raise RuntimeError(f"could not fetch {SAS}")

    monkeypatch.setattr(env_cmd, "run", boom)
    r = invoke(["env"])
    assert r.exit_code == 1 and "internal error" in r.stderr and "SECRETSIG" not in r.stderr


def test_saved_config_and_events_hold_no_secret(tmp_path):
    run = tmp_path / "run"
    r = invoke(["train", "--quiet", *mlp_args(run, 2)])
    assert r.exit_code == 0, r.stderr
    rd = RunDir(run)
    rd.event("warning", message=f"could not reach {SAS}", where={"url": "https://u:PW123@h/x"})
    rd.close()
    text = (run / "events.jsonl").read_text()
    assert "SECRETSIG" not in text and "PW123" not in text and "sig=REDACTED" in text


def test_sas_url_in_data_args_is_not_written_to_the_run_dir_and_resume_still_matches(tmp_path, monkeypatch):
    """The secret reaches the dataset builder, but config.yaml only holds REDACTED; a rerun still resumes."""
    (tmp_path / "sasdata_rubin_test.py").write_text(
        "import torch\n"
        "SEEN = []\n"
        "def data(url):\n"
        "    SEEN.append(url)\n"
        "    x = torch.randn(256, 8, generator=torch.Generator().manual_seed(0))\n"
        "    ds = torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long())\n"
        "    return ds, None\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "run"
    sets = ["data.name=synthetic", "data.import=sasdata_rubin_test:data", f"data.args={{url: '{SAS}'}}", "data.num_classes=2"]
    r = invoke(["train", "--quiet", *mlp_args(run, 4, *sets)])
    assert r.exit_code == 0, r.stderr
    import sasdata_rubin_test

    assert sasdata_rubin_test.SEEN == [SAS]  # the job itself used the real URL
    for name in os.listdir(run):
        if (run / name).is_file():
            assert "SECRETSIG" not in (run / name).read_text(errors="replace"), name
    assert "sig=REDACTED" in (run / "config.yaml").read_text()
    r = invoke(["train", "--quiet", *mlp_args(run, 8, *sets)])  # same config: resumes, not "different config"
    assert r.exit_code == 0, r.stderr
    assert json.loads((run / "summary.json").read_text())["steps"] == 8


def test_mlflow_failure_is_one_line_without_the_password(tmp_path):
    pytest.importorskip("mlflow")
    env = {"MLFLOW_TRACKING_URI": "https://user:SECRETPW@127.0.0.1:9/", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
           "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}
    p = rubin(["train", "--quiet", *mlp_args(tmp_path / "run", 2, "telemetry.sinks=[jsonl, mlflow]")], env=env)
    assert p.returncode == 1 and "telemetry sink mlflow could not start" in p.stderr, p.stderr[-2000:]
    assert "SECRETPW" not in p.stderr + p.stdout and "user:REDACTED@" in p.stderr and "Traceback" not in p.stderr
