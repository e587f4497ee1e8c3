"""Real multi-process training: 2 gloo ranks under torchrun against one process."""

import pytest
from trainhelp import events, losses, mlp_args, summary
from utils import invoke, run_torchrun

pytestmark = pytest.mark.slow
STEPS = 20


def _torchrun(run_dir, *extra, nproc=2, timeout=240):
    p = run_torchrun(nproc, ["train", "--quiet", *mlp_args(run_dir, STEPS, *extra)], timeout=timeout)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


def test_ddp_reproduces_single_process_loss_curve(tmp_path):
    single = tmp_path / "single"
    assert invoke(["train", "--quiet", *mlp_args(single, STEPS)]).exit_code == 0
    _torchrun(tmp_path / "ddp", "distributed.strategy=ddp")
    a, b = losses(single), losses(tmp_path / "ddp")
    assert len(a) == len(b) == STEPS
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-5
    assert a[-1] < a[0]  # it trained
    s = summary(tmp_path / "ddp")
    assert s["world_size"] == 2 and s["strategy"] == "ddp"


def test_fsdp_matches_ddp(tmp_path):
    _torchrun(tmp_path / "ddp", "distributed.strategy=ddp")
    _torchrun(tmp_path / "fsdp", "distributed.strategy=fsdp")
    a, b = losses(tmp_path / "ddp"), losses(tmp_path / "fsdp")
    assert len(a) == len(b) == STEPS
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-4
    assert summary(tmp_path / "fsdp")["strategy"] == "fsdp"
    assert (tmp_path / "fsdp" / "checkpoints" / f"step-{STEPS:08d}" / "dcp").is_dir()


def test_accumulation_equals_one_big_batch(tmp_path):
    assert invoke(["train", "--quiet", *mlp_args(tmp_path / "big", STEPS)]).exit_code == 0
    assert invoke(["train", "--quiet", *mlp_args(tmp_path / "acc", STEPS, "data.micro_batch_size=8")]).exit_code == 0
    a, b = losses(tmp_path / "big"), losses(tmp_path / "acc")
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-5


def test_a_config_error_under_torchrun_is_one_line_per_node(tmp_path):
    # every local rank meets the same typo before the group forms: local rank 0 says it, the others only exit 2
    p = run_torchrun(2, ["train", "--quiet", *mlp_args(tmp_path / "run", STEPS, "optim.lrr=0.1")], timeout=240)
    lines = [line for line in p.stderr.splitlines() if line.startswith("rubin: error:")]
    assert p.returncode != 0 and len(lines) == 1, p.stderr[-3000:]
    assert "optim.lrr" in lines[0]
    # local rank 0 said it and failed first (exit 2); the silent rank never exits before it
    root = p.stderr[p.stderr.index("Root Cause"):].split("=====")[0]
    assert "local_rank: 0" in root and "exitcode  : 2" in root, p.stderr[-3000:]
    # torchrun's own summary names the same line as the root cause, not a link to its docs
    assert f"traceback : {lines[0]}" in root, p.stderr[-3000:]
    assert not (tmp_path / "run").exists()  # nothing was touched


# -- one rank under torchrun: ddp and fsdp start a 1-rank process group (a one-GPU-per-node job) --------
ONE_RANK = ["distributed.backend=gloo", "run.device=cpu"]


def test_ddp_on_one_rank_under_torchrun_trains_and_checkpoints(tmp_path):
    single = tmp_path / "single"
    assert invoke(["train", "--quiet", *mlp_args(single, STEPS)]).exit_code == 0
    run = tmp_path / "ddp1"
    _torchrun(run, "distributed.strategy=ddp", "checkpoint.every_steps=10", *ONE_RANK, nproc=1)
    s = summary(run)
    assert s["status"] == "completed" and s["strategy"] == "ddp" and s["world_size"] == 1
    assert max(abs(x - y) for x, y in zip(losses(single), losses(run))) < 1e-5  # DDP over one rank changes nothing
    assert (run / "checkpoints" / "step-00000010" / "COMMITTED").is_file()
    assert (run / "checkpoints" / f"step-{STEPS:08d}" / "model.pt").is_file()


def test_fsdp_on_one_rank_under_torchrun_saves_async_dcp_then_resumes(tmp_path):
    """The CPU twin of tests/train/test_nccl_gpu.py's FSDP test: the same steps over gloo."""
    run = tmp_path / "fsdp1"
    ckpt = ["distributed.strategy=fsdp", "checkpoint.every_steps=4", "checkpoint.async=true", *ONE_RANK]
    p = run_torchrun(1, ["train", "--quiet", *mlp_args(run, 8, *ckpt)], timeout=240)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    first = summary(run)
    assert first["strategy"] == "fsdp" and first["world_size"] == 1 and first["steps"] == 8
    assert sorted(x.name for x in (run / "checkpoints").glob("step-*")) == ["step-00000004", "step-00000008"]
    assert (run / "checkpoints" / "step-00000008" / "dcp" / ".metadata").is_file()
    p = run_torchrun(1, ["train", "--quiet", *mlp_args(run, 12, *ckpt)], timeout=240)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert [e["step"] for e in events(run, "resume")] == [8]
    assert summary(run)["steps"] == 12 and summary(run)["strategy"] == "fsdp"


def test_ddp_without_a_launcher_is_refused_in_one_line(tmp_path):
    r = invoke(["train", "--quiet", *mlp_args(tmp_path / "run", 4, "distributed.strategy=ddp")])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "ddp needs torchrun (or another launcher)" in r.stderr and "--nproc-per-node=N" in r.stderr
    assert not (tmp_path / "run").exists()
