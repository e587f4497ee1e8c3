"""Rank detection for SkyPilot and the PyTorchJob operator, and `rubin env` showing the launcher."""

from __future__ import annotations

import json

import pytest
from utils import invoke

from rubin.errors import UsageError
from rubin.platform.launcher import detect

SKY = {"SKYPILOT_NODE_RANK": "1", "SKYPILOT_NUM_NODES": "3", "SKYPILOT_NUM_GPUS_PER_NODE": "8",
       "SKYPILOT_NODE_IPS": "10.0.0.5\n10.0.0.6\n10.0.0.7", "SKYPILOT_TASK_ID": "sky-2026-x"}
# What the training operator sets on worker pod 2 of a PyTorchJob (newer operators add PET_*).
PYTORCHJOB = {"MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "RANK": "2", "WORLD_SIZE": "4",
              "PET_NODE_RANK": "2", "PET_NNODES": "4", "PET_NPROC_PER_NODE": "1", "PET_MASTER_ADDR": "job-master-0"}
TORCHRUN = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "TORCHELASTIC_RUN_ID": "abc", "MASTER_ADDR": "10.0.0.5"}


def test_skypilot_node_without_torchrun():
    found = detect(SKY)
    assert (found.source, found.rank, found.local_rank, found.world_size) == ("skypilot", 1, 0, 3)
    assert found.master_addr == "10.0.0.5"  # the head is the first line of SKYPILOT_NODE_IPS


def test_pytorchjob_pod_without_torchrun():
    found = detect(PYTORCHJOB)
    assert (found.source, found.rank, found.local_rank, found.world_size) == ("pytorchjob", 2, 0, 4)
    assert found.master_addr == "job-master-0"


@pytest.mark.parametrize("outer", [SKY, PYTORCHJOB, {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0"}])
def test_torchrun_inside_any_scheduler_wins(outer):
    found = detect({**outer, **TORCHRUN})  # torchrun's ranks are the ones its workers must use
    assert (found.source, found.rank, found.local_rank, found.world_size) == ("torchrun", 5, 1, 8)


def test_elastic_pytorchjob_without_torchrun_is_an_error():
    with pytest.raises(UsageError, match="PET_NNODES='1:4'.*needs torchrun"):
        detect({**PYTORCHJOB, "PET_NNODES": "1:4"})


def test_garbled_values_are_one_line_errors():
    with pytest.raises(UsageError, match="SKYPILOT_NODE_RANK='x'"):
        detect({**SKY, "SKYPILOT_NODE_RANK": "x"})


def test_plain_process_is_single():
    assert detect({}).source == "single" and detect({}).world_size == 1


@pytest.mark.parametrize("env,expected", [(SKY, "skypilot"), (PYTORCHJOB, "pytorchjob"), (TORCHRUN, "torchrun")])
def test_rubin_env_shows_the_launcher(monkeypatch, env, expected):
    for k in list(SKY) + list(PYTORCHJOB) + list(TORCHRUN):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    r = invoke(["env", "--quick", "--json"])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["launcher"]["launcher"] == expected
    r = invoke(["env", "--quick"])
    assert f"- launcher: `{expected}`" in r.stdout


def _torchrun_summary(error_file) -> str:
    """The failure box torchrun prints for a worker that exited 2 with this error file (torch's own reader)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    failure = ProcessFailure(local_rank=0, pid=4242, exitcode=2, error_file=str(error_file))
    return ChildFailedError("rubin", {0: failure}).format_msg()


def test_torchrun_summary_names_rubins_error_line(tmp_path, monkeypatch):
    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    r = invoke(["train", str(tmp_path / "missing.yaml")])
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    box = _torchrun_summary(error_file)
    assert f"traceback : {r.stderr.strip()}" in box and "To enable traceback" not in box


def test_torchrun_summary_names_an_internal_error(tmp_path, monkeypatch):
    import rubin.cli.env as env_cmd

    def broken(args):
        raise KeyError("gpu_uuid")

    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    monkeypatch.setattr(env_cmd, "run", broken)
    r = invoke(["env"])
    assert r.exit_code == 1 and "internal error: KeyError" in r.stderr
    assert "traceback : rubin: internal error: KeyError: 'gpu_uuid'" in _torchrun_summary(error_file)


def test_outside_torchrun_no_error_file_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE", raising=False)
    monkeypatch.chdir(tmp_path)
    r = invoke(["train", "missing.yaml"])
    assert r.exit_code == 2 and list(tmp_path.iterdir()) == []
