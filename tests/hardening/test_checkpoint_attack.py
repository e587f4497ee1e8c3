"""Issue 16 items 1, 5-7: a checkpoint must never run code, and a bad one is skipped loudly, never silently."""

from __future__ import annotations

import io
import os
import pickle

import pytest
import torch
from hardkit import Payload, events, mlp_args, plant_dcp_attack, recommit, rubin, step_dir, summary
from utils import invoke

from rubin.train.checkpoint import manifest as mf
from rubin.train.checkpoint import safe_load


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """An uninterrupted 8-step run: the digest a fallback resume must reach."""
    run = tmp_path_factory.mktemp("straight") / "run"
    p = rubin(["train", *mlp_args(run, 8)])
    assert p.returncode == 0, p.stderr[-2000:]
    return summary(run)["param_digest"]


def test_dcp_metadata_payload_never_runs_on_resume_or_verify(tmp_path, crashed_at_9):
    run = crashed_at_9
    marker = tmp_path / "PWNED"
    plant_dcp_attack(step_dir(run, 8), marker)
    assert mf.verify(step_dir(run, 8), hashes=True) != []  # the recomputed sha256 no longer hides it

    v = invoke(["checkpoint", "verify", run])
    assert not marker.exists(), "verify unpickled the attacker's .metadata"
    assert v.exit_code == 3 and "INVALID" in v.stdout and "refused global posix.system" in v.stdout

    p = rubin(["train", *mlp_args(run, 12)])
    assert not marker.exists(), "resume unpickled the attacker's .metadata"
    assert p.returncode == 0, p.stderr[-2000:]
    assert "checkpoint step 8 is invalid, skipped" in p.stdout + p.stderr
    assert [e["step"] for e in events(run) if e["kind"] == "resume"][-1] == 4  # fell back to the previous one
    assert (run / "checkpoints" / "quarantine" / "step-00000008" / "dcp" / ".metadata").is_file()  # evidence kept
    assert summary(run)["steps"] == 12


def test_restricted_reader_accepts_real_dcp_metadata_and_refuses_others(tmp_path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    m = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(m.parameters())
    m(torch.randn(4, 3)).sum().backward()
    opt.step()
    msd, osd = get_state_dict(m, opt)
    dcp.save({"model": msd, "optim": osd}, storage_writer=dcp.FileSystemWriter(str(tmp_path / "dcp")), no_dist=True)
    assert safe_load.check(tmp_path / "dcp") == []
    md = safe_load.load_metadata(tmp_path / "dcp")
    assert "model.weight" in md.state_dict_metadata and "optim.param_groups.0.lr" in md.state_dict_metadata

    into = torch.nn.Linear(3, 2)
    into_opt = torch.optim.AdamW(into.parameters())
    state = dict(zip(("model", "optim"), get_state_dict(into, into_opt)))
    dcp.load(state, storage_reader=safe_load.reader(tmp_path / "dcp"), planner=safe_load.planner(), no_dist=True)
    assert torch.equal(state["model"]["weight"], msd["weight"])

    marker = tmp_path / "PWNED"
    with pytest.raises(safe_load.UnsafeCheckpoint, match="refused global posix.system"):
        safe_load.load_metadata_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(safe_load.UnsafeCheckpoint, match="not DCP checkpoint metadata"):
        safe_load.load_metadata_bytes(pickle.dumps({"a": 1}))
    assert not marker.exists()


def test_non_tensor_dcp_entry_with_a_payload_is_refused(tmp_path):
    """The shard file's non-tensor entries are pickles too: torch's planner loads them with weights_only=False."""
    import torch.distributed.checkpoint as dcp

    dcp.save({"lr": 0.5}, storage_writer=dcp.FileSystemWriter(str(tmp_path / "dcp")), no_dist=True)
    md = safe_load.load_metadata(tmp_path / "dcp")
    (index, info), = md.storage_data.items()
    marker = tmp_path / "PWNED"
    evil = io.BytesIO()
    torch.save(Payload(marker), evil)
    shard = tmp_path / "dcp" / info.relative_path
    blob = bytearray(shard.read_bytes())
    blob[info.offset:info.offset + info.length] = b""  # splice the payload in place of the entry
    blob[info.offset:info.offset] = evil.getvalue()
    shard.write_bytes(bytes(blob))
    info.length = len(evil.getvalue())
    (tmp_path / "dcp" / ".metadata").write_bytes(pickle.dumps(md))
    problems = safe_load.check(tmp_path / "dcp")
    assert problems and "is not plain data" in problems[0]
    with pytest.raises(safe_load.UnsafeCheckpoint, match="dcp entry 'lr' is not plain data"):
        safe_load.load({"lr": 0.0}, tmp_path / "dcp")
    assert not marker.exists()


def test_unreadable_newest_checkpoint_falls_back_with_a_line(crashed_at_9, straight):
    run = crashed_at_9
    os.chmod(step_dir(run, 8) / mf.COMMITTED, 0)
    if os.access(step_dir(run, 8) / mf.COMMITTED, os.R_OK):  # root reads anything: use an unreadable directory entry instead
        os.chmod(step_dir(run, 8) / mf.COMMITTED, 0o644)
        (step_dir(run, 8) / mf.COMMITTED).unlink()
        (step_dir(run, 8) / mf.COMMITTED).mkdir()  # read_bytes() -> IsADirectoryError, an OSError like EACCES
    v = invoke(["checkpoint", "verify", run])
    assert v.exit_code == 3 and "internal error" not in v.stderr and "step        8  INVALID" in v.stdout
    p = rubin(["train", *mlp_args(run, 8)])
    assert p.returncode == 0, p.stderr[-2000:]
    assert "checkpoint step 8 is invalid, skipped" in p.stdout + p.stderr
    assert [e for e in events(run) if e["kind"] == "checkpoint_invalid" and e["step"] == 8]
    assert summary(run)["param_digest"] == straight


@pytest.mark.parametrize("name", ["model.pt", mf.COMMITTED, mf.MANIFEST])
def test_fifo_in_a_checkpoint_falls_back_instead_of_blocking(crashed_at_9, straight, name):
    """Opening a FIFO for reading blocks until a writer comes: verify and resume must never open one."""
    run = crashed_at_9
    (step_dir(run, 8) / name).unlink()
    os.mkfifo(step_dir(run, 8) / name)
    v = rubin(["checkpoint", "verify", run], timeout=120)  # a hang fails here on the timeout
    assert v.returncode == 3 and "internal error" not in v.stderr and "step        8  INVALID" in v.stdout
    p = rubin(["train", *mlp_args(run, 8)], timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "checkpoint step 8 is invalid, skipped" in p.stdout + p.stderr
    assert summary(run)["param_digest"] == straight


def test_all_checkpoints_bad_refuses_fresh_start_unless_force(crashed_at_9):
    run = crashed_at_9
    for step in (4, 8):
        with open(step_dir(run, step) / "model.pt", "r+b") as f:
            f.seek(100)
            f.write(b"\xff" * 8)
    p = rubin(["train", *mlp_args(run, 12)])
    assert p.returncode == 2
    assert "none verifies" in p.stderr and "--force" in p.stderr and "Traceback" not in p.stderr
    assert (step_dir(run, 8) / "model.pt").is_file() and (step_dir(run, 4) / "model.pt").is_file()  # untouched
    p = rubin(["train", *mlp_args(run, 12), "--force"])
    assert p.returncode == 0, p.stderr[-2000:]
    out = p.stdout + p.stderr
    assert "checkpoint step 8 is invalid, skipped" in out and "checkpoint step 4 is invalid, skipped" in out
    quarantine = run / "checkpoints" / "quarantine"
    assert (quarantine / "step-00000008" / "model.pt").is_file() and (quarantine / "step-00000004" / "model.pt").is_file()
    assert summary(run)["steps"] == 12 and not [e for e in events(run) if e["kind"] == "resume"]


def test_checkpoint_list_never_claims_resume_without_hashing(crashed_at_9):
    run = crashed_at_9
    with open(step_dir(run, 8) / "model.pt", "r+b") as f:  # same size, different bytes: sizes cannot see it
        f.seek(100)
        f.write(b"\xff" * 8)
    ls = invoke(["checkpoint", "list", run])
    assert ls.exit_code == 0 and "resume would use" not in ls.stdout and "unverified (sizes only)" in ls.stdout
    assert "step        8  sizes ok" in ls.stdout
    v = invoke(["checkpoint", "verify", run])
    assert v.exit_code == 3 and "resume would use: step 4" in v.stdout


def test_hmac_key_refuses_a_recomputed_manifest(tmp_path, monkeypatch):
    from rubin.train.checkpoint import CheckpointStore, save_file

    monkeypatch.setenv(mf.KEY_ENV, "outside-the-run-dir")
    store = CheckpointStore(tmp_path, keep_last=5)
    path = store.save(3, lambda tmp: save_file({"w": torch.ones(4)}, tmp / "model.pt"), {})
    assert mf.verify(path) == []
    save_file({"w": torch.zeros(4)}, path / "model.pt")
    recommit(path)  # the attacker recomputes the sha256s, but has no key
    assert any("not signed" in p for p in mf.verify(path))
    monkeypatch.setenv(mf.KEY_ENV, "another-key")
    path2 = store.save(4, lambda tmp: save_file({"w": torch.ones(4)}, tmp / "model.pt"), {})
    monkeypatch.setenv(mf.KEY_ENV, "outside-the-run-dir")
    assert any("signature does not match" in p for p in mf.verify(path2))
