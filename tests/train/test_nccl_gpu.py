"""NCCL, as far as one GPU allows: DDP and FSDP2 through torchrun at world size 1 with the NCCL backend, an
async DCP save on the GPU and a resume from it. Skipped without a GPU (scripts/gpu-check.sh runs them).

Their CPU twins (gloo, the same steps) are in test_train_distributed.py. Compile is off: these test the
process group and the checkpoint, and an inductor cold compile would only add time to the GPU check."""

import pytest
from trainhelp import losses, mlp_args, summary
from utils import run_torchrun

from rubin.runs import read_jsonl

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
NCCL = ["run.device=cuda", "distributed.backend=nccl", "distributed.compile=false"]


def _torchrun(run_dir, steps, *extra):
    p = run_torchrun(1, ["train", "--quiet", *mlp_args(run_dir, steps, *NCCL, *extra)], timeout=180)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


def test_ddp_over_nccl_trains_at_world_size_1(tmp_path):
    _torchrun(tmp_path / "ddp", 12, "distributed.strategy=ddp")
    s = summary(tmp_path / "ddp")
    assert s["status"] == "completed" and s["strategy"] == "ddp" and s["world_size"] == 1
    loss = losses(tmp_path / "ddp")
    assert len(loss) == 12 and loss[-1] < loss[0]


def test_fsdp2_over_nccl_async_dcp_save_then_resume(tmp_path):
    run = tmp_path / "fsdp"
    ckpt = ["distributed.strategy=fsdp", "checkpoint.every_steps=4", "checkpoint.async=true"]
    _torchrun(run, 8, *ckpt)
    first = summary(run)
    assert first["strategy"] == "fsdp" and first["steps"] == 8
    saved = sorted(p.name for p in (run / "checkpoints").glob("step-*"))
    assert saved == ["step-00000004", "step-00000008"]
    assert (run / "checkpoints" / "step-00000008" / "dcp" / ".metadata").is_file()
    assert (run / "checkpoints" / "step-00000008" / "COMMITTED").is_file()
    # Resume from the async DCP save, on the GPU, to step 12.
    _torchrun(run, 12, *ckpt)
    resumes = [e for e in read_jsonl(run / "events.jsonl") if e["kind"] == "resume"]
    assert [e["step"] for e in resumes] == [8]
    rows = {r["step"]: r for r in read_jsonl(run / "metrics.jsonl")}
    assert sorted(rows) == list(range(1, 13))
    assert summary(run)["steps"] == 12
