"""Commit protocol, verification, fallback, retention, disk full and safe loading (in-process)."""

import json
import os

import pytest
import torch

from rubin.errors import RubinError
from rubin.train.checkpoint import COMMITTED, MANIFEST, CheckpointStore, load_file, save_file
from rubin.train.faults import inject


def make_store(root, events=None, **kw):
    kw.setdefault("keep_last", 10)
    return CheckpointStore(root, on_event=lambda k, d: events.append((k, d)) if events is not None else None, **kw)


def save(store, step, numel=64):
    def write(tmp):
        save_file({"w": torch.full((numel,), float(step))}, tmp / "model.pt")
        import torch.distributed.checkpoint as dcp

        dcp.save({"shard": torch.arange(8) + step}, storage_writer=dcp.FileSystemWriter(str(tmp / "dcp")), no_dist=True)

    return store.save(step, write, {"strategy": "single", "config_hash": "abc"})


def test_commit_writes_manifest_marker_and_step_folder(tmp_path):
    events = []
    store = make_store(tmp_path, events)
    path = save(store, 7)
    assert path == tmp_path / "step-00000007" and (path / COMMITTED).is_file()
    man = json.loads((path / MANIFEST).read_text())
    assert set(man["files"]) == {"model.pt", "dcp/__0_0.distcp", "dcp/.metadata"}
    assert man["step"] == 7 and man["strategy"] == "single" and man["torch_version"] == torch.__version__
    assert man["bytes"] == sum(f["bytes"] for f in man["files"].values())
    assert not any(p.name.startswith(".tmp") for p in tmp_path.iterdir())
    assert store.committed() == [(7, path)] and store.latest_valid() == (7, path)
    assert store.verify(path) == []
    kinds = [k for k, _ in events]
    assert kinds == ["checkpoint_saved"] and events[0][1]["step"] == 7 and events[0][1]["bytes"] == man["bytes"]


def _truncate(p):
    f = p / "model.pt"
    f.write_bytes(f.read_bytes()[:-10])


def _flip(p):
    f = p / "model.pt"
    b = bytearray(f.read_bytes())
    b[len(b) // 2] ^= 0x01
    f.write_bytes(bytes(b))


def _drop_shard(p):
    (p / "dcp" / "__0_0.distcp").unlink()


def _drop_marker(p):
    (p / COMMITTED).unlink()


@pytest.mark.parametrize(
    "damage, expect",
    [(_truncate, "truncated"), (_flip, "sha256"), (_drop_shard, "dcp/__0_0.distcp: missing"), (_drop_marker, "COMMITTED marker missing")],
)
def test_damaged_newest_is_reported_and_skipped(tmp_path, damage, expect):
    events = []
    store = make_store(tmp_path, events)
    save(store, 1)
    newest = save(store, 2)
    damage(newest)
    events.clear()
    assert store.latest_valid() == (1, tmp_path / "step-00000001")
    assert [k for k, _ in events] == ["checkpoint_invalid"]
    assert events[0][1]["step"] == 2 and expect in events[0][1]["reason"]
    assert any(expect in p for p in store.verify(newest))


def test_edited_manifest_is_caught_by_the_marker(tmp_path):
    store = make_store(tmp_path)
    path = save(store, 3)
    man = json.loads((path / MANIFEST).read_text())
    man["step"] = 4
    (path / MANIFEST).write_text(json.dumps(man))
    assert any("does not match the hash recorded in COMMITTED" in p for p in store.verify(path))
    assert store.latest_valid() is None


def test_uncommitted_tmp_folder_never_counts_and_is_cleaned_at_start(tmp_path):
    store = make_store(tmp_path)
    save(store, 1)
    tmp = store.begin(2)
    save_file({"w": torch.ones(3)}, tmp / "model.pt")
    (tmp / COMMITTED).write_text("{}")  # even a marker inside a tmp folder means nothing
    assert store.latest_valid()[0] == 1 and [s for s, _ in store.committed()] == [1]
    make_store(tmp_path)  # a restart (rank 0) removes the leftovers
    assert not tmp.exists() and (tmp_path / "step-00000001").is_dir()


def test_resaving_a_step_replaces_it(tmp_path):
    store = make_store(tmp_path)
    save(store, 5)
    tmp = store.begin(5)
    save_file({"w": torch.zeros(2)}, tmp / "model.pt")
    path = store.commit(5, tmp, {})
    assert store.verify(path) == [] and torch.equal(load_file(path / "model.pt")["w"], torch.zeros(2))
    assert not (path / "dcp").exists()


def test_retention_keep_last_and_milestones(tmp_path):
    store = make_store(tmp_path, keep_last=2, keep_every_steps=20)
    for step in (10, 20, 30, 40, 50, 60):
        save(store, step)
    assert [s for s, _ in store.committed()] == [20, 40, 50, 60]
    assert not any(p.name.startswith(".trash") for p in tmp_path.iterdir())


def test_retention_never_deletes_the_newest_verified(tmp_path):
    store = make_store(tmp_path, keep_last=1)
    save(store, 1)
    save(store, 2)
    assert [s for s, _ in store.committed()] == [2]
    _flip(tmp_path / "step-00000002")
    save(store, 3)  # trusted: it was hashed while committing, so 2 (bad) goes
    assert [s for s, _ in store.committed()] == [3]
    _flip(tmp_path / "step-00000003")
    tmp = store.begin(4)  # a save that is never committed does not change anything
    store.abort(tmp)
    assert store.apply_retention() == [] and [s for s, _ in store.committed()] == [3]


def test_retention_keeps_older_valid_when_newer_are_corrupt(tmp_path):
    store = make_store(tmp_path, keep_last=5)
    for s in (1, 2, 3):
        save(store, s)
    _flip(tmp_path / "step-00000002")
    _flip(tmp_path / "step-00000003")
    store.keep_last = 1
    store.apply_retention()
    assert [s for s, _ in store.committed()] == [1, 3]  # 3: keep_last; 1: the newest that verifies
    assert store.latest_valid()[0] == 1


def test_disk_full_is_a_clear_error_and_keeps_the_previous(tmp_path, monkeypatch):
    monkeypatch.setenv("RUBIN_FAULT", "diskfull@save=2")
    inject.reload()
    try:
        store = make_store(tmp_path)
        save(store, 1)
        with pytest.raises(RubinError, match=r"disk full .*previous committed one is kept"):
            save(store, 2)
    finally:
        monkeypatch.delenv("RUBIN_FAULT")
        inject.reload()
    assert not any(p.name.startswith(".tmp") for p in tmp_path.iterdir())
    assert store.latest_valid() == (1, tmp_path / "step-00000001")
    assert torch.equal(load_file(tmp_path / "step-00000001" / "model.pt")["w"], torch.full((64,), 1.0))


def test_abort_only_removes_tmp_folders(tmp_path):
    store = make_store(tmp_path)
    path = save(store, 1)
    store.abort(path)
    assert path.is_dir()


def test_bad_keep_last_is_a_usage_error(tmp_path):
    with pytest.raises(RubinError, match=r"checkpoint.keep_last=0"):
        CheckpointStore(tmp_path, keep_last=0)


class Payload:
    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


@pytest.mark.parametrize("fmt", ["torch", "raw-pickle"])
def test_malicious_pickle_is_refused_and_nothing_runs(tmp_path, fmt):
    import pickle

    target = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    if fmt == "torch":
        torch.save({"w": torch.ones(2), "x": Payload(target)}, evil)
    else:
        evil.write_bytes(pickle.dumps(Payload(target), protocol=2))
    assert not target.exists()
    with pytest.raises(RubinError, match=r"carries a pickled object that is not plain tensors/containers .*refusing to load it"):
        load_file(evil)
    assert not target.exists()
    # the same payload through plain pickle would run: the test's payload is real
    pickle.loads(pickle.dumps(Payload(target)))
    assert target.exists()


def test_load_file_round_trip_and_truncated_file(tmp_path):
    p = tmp_path / "m.pt"
    save_file({"w": torch.arange(5.0), "n": 3, "s": "x"}, p)
    back = load_file(p)
    assert torch.equal(back["w"], torch.arange(5.0)) and back["n"] == 3
    p.write_bytes(p.read_bytes()[:40])
    with pytest.raises(RubinError, match="truncated or corrupted"):
        load_file(p)
    with pytest.raises(RubinError, match="missing"):
        load_file(tmp_path / "nope.pt")
