"""rubin train end to end, in-process: the run dir contract, resume-by-rerun, bad input."""

import json

import pytest
from trainhelp import events, losses, mlp_args, summary
from utils import invoke


def test_run_dir_contract(tmp_path):
    run = tmp_path / "run"
    r = invoke(["train", "--quiet", *mlp_args(run, 12, "checkpoint.every_steps=5", "run.eval_every_steps=6")])
    assert r.exit_code == 0, r.stderr
    for name in ("config.yaml", "env.json", "metrics.jsonl", "eval.jsonl", "events.jsonl", "summary.json"):
        assert (run / name).is_file(), name
    s = summary(run)
    assert s["status"] == "completed" and s["steps"] == 12
    assert len(s["param_digest"]) == 64
    assert s["samples_per_s"] > 0 and s["wall_s"] > 0
    assert 0 <= s["eval"]["accuracy"] <= 1
    rows = [json.loads(l) for l in open(run / "metrics.jsonl")]
    assert [r["step"] for r in rows] == list(range(1, 13))
    assert set(rows[-1]["time"]) == {"data_s", "compute_s", "ckpt_s", "step_s"}
    assert rows[-1]["mem"]["peak_bytes"] > 0
    assert rows[4]["time"]["ckpt_s"] > 0  # step 5 saved a checkpoint and the stall is counted
    assert [e["step"] for e in map(json.loads, open(run / "eval.jsonl"))] == [6, 12]
    steps = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert steps == ["step-00000005", "step-00000010", "step-00000012"]
    assert all((run / "checkpoints" / s / "COMMITTED").exists() for s in steps)
    assert "mlp" in (run / "config.yaml").read_text()


def test_rerun_of_a_finished_run_changes_nothing_and_a_longer_run_resumes(tmp_path):
    run = tmp_path / "run"
    args = ["train", *mlp_args(run, 8, "checkpoint.every_steps=4")]
    assert invoke(["train", "--quiet", *args[1:]]).exit_code == 0
    files = {name: (run / name).read_bytes() for name in ("summary.json", "events.jsonl", "metrics.jsonl", "config.yaml", "env.json")}
    ckpts = sorted(p.name for p in (run / "checkpoints").iterdir())
    r = invoke(args)
    assert r.exit_code == 0, r.stderr
    assert "already complete at step 8" in r.stdout and "nothing to do" in r.stdout
    assert "final loss" in r.stdout  # the summary is shown again
    assert {name: (run / name).read_bytes() for name in files} == files  # summary.json, events, metrics: untouched
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ckpts
    # more steps asked for: the same command resumes from the newest checkpoint and says so, in one line
    r = invoke(["train", *mlp_args(run, 10, "checkpoint.every_steps=4")])
    assert r.exit_code == 0, r.stderr
    line = [x for x in r.stdout.splitlines() if x.startswith("resuming")]
    assert line == [f"resuming from step 8 (checkpoint {run / 'checkpoints' / 'step-00000008'}), verified"]
    assert summary(run)["steps"] == 10
    kinds = [e["kind"] for e in events(run)]
    assert kinds.count("resume") == 1 and kinds.count("start") == 2


def test_different_config_in_same_dir_is_refused_then_forced(tmp_path):
    run = tmp_path / "run"
    assert invoke(["train", "--quiet", *mlp_args(run, 4)]).exit_code == 0
    before = (run / "summary.json").read_text()
    r = invoke(["train", "--quiet", *mlp_args(run, 4, "optim.lr=0.5")])
    assert r.exit_code == 2
    assert "different config" in r.stderr and "optim.lr" in r.stderr
    assert (run / "summary.json").read_text() == before  # nothing touched
    r = invoke(["train", "--quiet", "--force", *mlp_args(run, 4, "optim.lr=0.5")])
    assert r.exit_code == 0, r.stderr
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("run.old-")]
    assert len(aside) == 1 and (aside[0] / "summary.json").read_text() == before


BAD = [
    (["model.nme=mlp"], "unknown key 'model.nme' (did you mean 'name'?)"),
    (["run.max_steps=many"], "run.max_steps='many' is not valid"),
    (["model.name=transformerz"], "model.name"),
    (["data.name=imagenet"], "data.name"),
    (["data.name=cifar10", "data.args={}", "data.path=/definitely/not/here"],
     "data.path='/definitely/not/here' is not valid: no such file"),
    (["data.batch_size=32", "data.micro_batch_size=5"], "data.micro_batch_size=5 does not divide"),
    (["precision=fp16"], "precision='fp16' is not valid: fp16 needs a CUDA GPU"),
    (["model.import=no_such_pkg.models:build"], "model.import"),
    (["optim.lr=-1"], "optim.lr=-1 is not valid"),
    (["run.max_steps=null"], "run.max_steps and run.epochs are both missing"),
]


@pytest.mark.parametrize("override,needle", BAD, ids=[b[1][:30] for b in BAD])
def test_bad_input_is_one_line_exit_2_and_touches_nothing(tmp_path, override, needle):
    run = tmp_path / "run"
    r = invoke(["train", "--quiet", *mlp_args(run, 4, *override)])
    assert r.exit_code == 2
    assert needle in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert not run.exists()


def test_user_import_model_and_data(tmp_path, monkeypatch):
    (tmp_path / "usercode_rubin_test.py").write_text(
        "import torch\n"
        "class Ring(torch.utils.data.Dataset):\n"
        "    def __len__(self): return 256\n"
        "    def __getitem__(self, i):\n"
        "        g = torch.Generator().manual_seed(i)\n"
        "        x = torch.randn(8, generator=g)\n"
        "        return x, int(x[0] > 0)\n"
        "def data():\n"
        "    return Ring(), None\n"
        "def model(width=16):\n"
        "    m = torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.ReLU(), torch.nn.Linear(width, 2))\n"
        "    m.built_by_user = True\n"
        "    return m\n"
    )
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    r = invoke(["train", "--quiet", *mlp_args(run, 30, "model.import=usercode_rubin_test:model", "model.args={width: 24}",
                                              "data.import=usercode_rubin_test:data", "data.args={}", "optim.lr=0.02")])
    assert r.exit_code == 0, r.stderr
    ls = losses(run)
    assert sum(ls[-5:]) / 5 < sum(ls[:5]) / 5 * 0.8  # it learned the rule
    assert summary(run)["eval"] == {}  # no eval split given


def test_print_config_and_help_config():
    r = invoke(["train", "--print-config", "--set", "optim.lr=0.25"])
    assert r.exit_code == 0 and "lr: 0.25" in r.stdout
    r = invoke(["train", "--help-config"])
    assert "distributed.strategy" in r.stdout and "FSDP2" in r.stdout


def test_verify_checkpoints_without_training(tmp_path):
    run = tmp_path / "run"
    assert invoke(["train", "--quiet", *mlp_args(run, 4, "checkpoint.every_steps=2")]).exit_code == 0
    before = (run / "metrics.jsonl").read_text()
    r = invoke(["train", "--verify-checkpoints", *mlp_args(run, 4, "checkpoint.every_steps=2")])
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "step-00000004" in r.stdout
    f = run / "checkpoints" / "step-00000004" / "model.pt"
    f.write_bytes(f.read_bytes()[:-10])
    r = invoke(["train", "--verify-checkpoints", *mlp_args(run, 4, "checkpoint.every_steps=2")])
    assert r.exit_code == 3
    assert (run / "metrics.jsonl").read_text() == before  # no training happened


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["plan", "--help"], ["bench", "--help"]])
def test_help_never_imports_torch(argv):
    import subprocess
    import sys

    code = f"import sys; from rubin.cli import main; main({argv!r}); print('TORCH', 'torch' in sys.modules)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "usage: rubin" in p.stdout
    assert "TORCH False" in p.stdout


def test_python_dash_m_rubin_is_the_same_cli():
    from utils import run_rubin

    p = run_rubin(["--version"])
    assert p.returncode == 0 and p.stdout.startswith("rubin ")


def test_a_save_slower_than_the_grace_period_is_reported_then_and_at_the_next_start(tmp_path):
    run = tmp_path / "run"
    args = ["train", *mlp_args(run, 4, "checkpoint.every_steps=2", "checkpoint.preemption_grace_s=0.000001")]
    r = invoke(args)
    assert r.exit_code == 0
    assert "more than checkpoint.preemption_grace_s=1e-06 s" in r.stdout
    warned = [e for e in events(run) if e["kind"] == "warning" and "preemption_grace_s" in e["message"]]
    assert len(warned) == 1 and warned[0]["save_s"] > 0
    r = invoke([*args, "--set", "run.max_steps=6"])  # resume: the warning comes at startup
    assert r.exit_code == 0
    assert r.stdout.index("preemption_grace_s") < r.stdout.index("step 5/")
