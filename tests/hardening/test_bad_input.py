"""Issue 16 item 13 and 3: bad input is one line, exit 2, before the run dir is made (in-process, fast)."""

from __future__ import annotations

import os
import subprocess

import pytest
from hardkit import alias_bomb, mlp_args
from utils import invoke

CASES = [
    (["optim.betas=[2,-1]"], "optim.betas.0=2 is not valid"),
    (["optim.lr=1e308"], "optim.lr='1e308' is not valid: input should be less than or equal to 10"),
    (["optim.lr=1.0e+308"], "optim.lr=1e+308 is not valid: input should be less than or equal to 10"),
    (["optim.lr=inf"], "optim.lr='inf' is not valid: input should be a finite number"),
    (["optim.lr=.nan"], "optim.lr=nan is not valid: input should be a finite number"),
    (["optim.weight_decay=inf"], "optim.weight_decay='inf' is not valid: input should be a finite number"),
    (["run.max_steps=null", "run.epochs=.inf"], "run.epochs=inf is not valid: input should be a finite number"),
    (["run.seed=99999999999999999999999"], "run.seed=99999999999999999999999 is not valid"),
    (["run.seed=-1"], "run.seed=-1 is not valid"),
    (["distributed.strategy=ddp"], "distributed.strategy='ddp' is not valid: ddp needs torchrun"),
    (["distributed.strategy=fsdp"], "distributed.strategy='fsdp' is not valid: fsdp needs torchrun"),
    (["run.dir=/dev/null"], "run.dir='/dev/null' is not valid: it exists and is not a directory"),
]


@pytest.mark.parametrize("sets,needle", CASES, ids=[c[0][-1] for c in CASES])
def test_bad_value_is_one_line_exit_2_and_no_run_dir(tmp_path, sets, needle):
    run = tmp_path / "run"
    r = invoke(["train", "--quiet", *mlp_args(run, 4, *sets)])
    assert r.exit_code == 2, r.stderr
    assert needle in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not run.exists()


@pytest.mark.parametrize("name", ["../../x", "a/b", "..", "/abs", "a\\b"])
def test_run_name_cannot_leave_the_runs_folder(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    args = mlp_args("unused", 4)
    i = args.index("run.dir=unused")
    del args[i - 1:i + 1]
    r = invoke(["train", "--quiet", *args, "--set", f"run.name={name}"])
    assert r.exit_code == 2 and "run.name=" in r.stderr and "is not valid" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == [] and not (tmp_path.parent / "x").exists()


def test_run_dir_under_a_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    r = invoke(["train", "--quiet", *mlp_args(tmp_path / "afile" / "run", 4)])
    assert r.exit_code == 2 and "is a file, so nothing can be created under it" in r.stderr, r.stderr
    assert (tmp_path / "afile").read_text() == "x"


@pytest.fixture
def read_only_dir(tmp_path):
    """A real read-only filesystem (a tmpfs mounted ro); skipped where mounting is not allowed."""
    mnt = tmp_path / "ro"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mnt)], capture_output=True)
    if p.returncode != 0:
        pytest.skip("cannot mount a read-only tmpfs here (needs privileges)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_run_dir_on_a_read_only_filesystem(read_only_dir):
    r = invoke(["train", "--quiet", *mlp_args(read_only_dir / "run", 4)])
    assert r.exit_code == 2 and "is on a read-only filesystem" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def _config(tmp_path, text: bytes) -> str:
    p = tmp_path / "cfg.yaml"
    p.write_bytes(text)
    return str(p)


def test_latin1_config_file(tmp_path):
    cfg = _config(tmp_path, "run:\n  name: caf\xe9\n".encode("latin-1"))
    r = invoke(["train", cfg, "--quiet", *mlp_args(tmp_path / "run", 4)])
    assert r.exit_code == 2 and "is not UTF-8 text (byte 0xe9" in r.stderr, r.stderr
    assert not (tmp_path / "run").exists()


def test_config_path_is_a_directory(tmp_path):
    r = invoke(["train", str(tmp_path), "--quiet"])
    assert r.exit_code == 2 and "is a directory, not a file" in r.stderr and "does not exist" not in r.stderr


def test_duplicate_top_level_key(tmp_path):
    cfg = _config(tmp_path, b"optim:\n  lr: 0.1\nrun:\n  seed: 1\noptim:\n  lr: 0.2\n")
    r = invoke(["train", cfg, "--quiet", *mlp_args(tmp_path / "run", 4)])
    assert r.exit_code == 2 and "has the key 'optim' twice (line 5)" in r.stderr, r.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("content,needle", [(b"run: [unclosed\n", "is not valid YAML"), (b"- a\n- b\n", "must hold a mapping")])
def test_garbled_config_in_an_existing_run_dir(tmp_path, content, needle):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_bytes(content)
    r = invoke(["train", "--quiet", *mlp_args(run, 4)])
    assert r.exit_code == 2 and needle in r.stderr and "the run dir's config" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert (run / "config.yaml").read_bytes() == content and not (run / "events.jsonl").exists()
    assert sorted(p.name for p in run.iterdir()) in (["config.yaml"], [".lock", "config.yaml"])
    assert not os.path.getsize(run / ".lock") if (run / ".lock").exists() else True


def test_a_yaml_alias_bomb_in_model_args_is_refused_at_load(tmp_path):
    cfg = tmp_path / "bomb.yaml"
    cfg.write_text(alias_bomb())
    run = tmp_path / "run"
    r = invoke(["train", cfg, "--quiet", *mlp_args(run, 4)])
    assert r.exit_code == 2 and "expands to more than 100,000 values through its aliases" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not run.exists()


def test_ordinary_yaml_aliases_still_load():
    from rubin.errors import load_yaml_text

    doc = load_yaml_text("base: &b {hidden: 16}\nmodel: {args: *b}\nlist: &l [1, 2]\nagain: *l\n")
    assert doc == {"base": {"hidden": 16}, "model": {"args": {"hidden": 16}}, "list": [1, 2], "again": [1, 2]}
