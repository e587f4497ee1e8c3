"""``rubin checkpoint verify|list`` through the real CLI entry point."""

import json

import torch
from utils import invoke

from rubin.train.checkpoint import CheckpointStore, save_file


def make_run(tmp_path, steps=(1, 2)):
    store = CheckpointStore(tmp_path / "run" / "checkpoints", keep_last=5)
    for s in steps:
        store.save(s, lambda tmp, s=s: save_file({"w": torch.full((32,), float(s))}, tmp / "model.pt"), {"strategy": "single"})
    return tmp_path / "run"


def test_verify_all_good_exits_0(tmp_path):
    run = make_run(tmp_path)
    r = invoke(["checkpoint", "verify", run])
    assert r.exit_code == 0, r.stderr
    assert "step        2  ok" in r.stdout and "resume would use: step 2" in r.stdout
    r = invoke(["checkpoint", "verify", run / "checkpoints" / "step-00000001", "--json"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["version"] == 1 and [e["step"] for e in doc["checkpoints"]] == [1]


def test_verify_flipped_byte_exits_3_and_names_the_file(tmp_path):
    run = make_run(tmp_path)
    f = run / "checkpoints" / "step-00000002" / "model.pt"
    b = bytearray(f.read_bytes())
    b[-30] ^= 0xFF
    f.write_bytes(bytes(b))
    r = invoke(["checkpoint", "verify", run, "--json"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 3 and doc["ok"] is False and doc["latest_valid"] == 1
    bad = doc["checkpoints"][1]
    assert bad["step"] == 2 and not bad["valid"] and "model.pt: sha256 differs" in bad["problems"][0]
    # list checks sizes only, so the same-size flip passes there
    assert invoke(["checkpoint", "list", run]).exit_code == 0


def test_list_catches_truncation_and_bad_path_is_usage(tmp_path):
    run = make_run(tmp_path)
    f = run / "checkpoints" / "step-00000001" / "model.pt"
    f.write_bytes(f.read_bytes()[:100])
    r = invoke(["checkpoint", "list", run])
    assert r.exit_code == 3 and "INVALID" in r.stdout and "truncated" in r.stdout
    r = invoke(["checkpoint", "verify", tmp_path / "nope"])
    assert r.exit_code == 2 and "RUN_OR_CKPT_DIR=" in r.stderr and "no such directory" in r.stderr
    assert invoke(["checkpoint", "verify", tmp_path]).exit_code == 3  # no checkpoints at all is a problem


def test_verify_dir_is_the_library_entry_for_train(tmp_path, capsys):
    from rubin.cli.checkpoint import verify_dir

    run = make_run(tmp_path)
    assert verify_dir(str(run), as_json=True) == 0
    assert json.loads(capsys.readouterr().out)["latest_valid"] == 2
    (run / "checkpoints" / "step-00000002" / "COMMITTED").unlink()
    assert verify_dir(str(run)) == 3
    assert "COMMITTED marker missing" in capsys.readouterr().out
