"""Strategy options in one process: activation checkpointing really recomputes, compile trains the same."""

import pytest
import torch
from trainhelp import losses, mlp_args
from utils import invoke

from rubin.errors import UsageError
from rubin.train.strategy import needs_group, resolve
from rubin.workloads.contract.blocks import apply_activation_checkpointing


def test_activation_checkpointing_recomputes_each_block_in_backward():
    torch.manual_seed(0)
    blocks = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()) for _ in range(3)])
    calls = []
    for i, b in enumerate(blocks):
        b[0].register_forward_hook(lambda m, a, o, i=i: calls.append(i))  # inner modules run again on recompute
    keys = sorted(blocks.state_dict())
    apply_activation_checkpointing(list(blocks))
    x = torch.randn(4, 8, requires_grad=True)
    y = x
    for b in blocks:
        y = b(y)
    assert calls == [0, 1, 2]
    y.sum().backward()
    assert sorted(calls) == [0, 0, 1, 1, 2, 2]  # each block ran again during backward
    assert sorted(blocks.state_dict()) == keys  # checkpoints stay loadable without it


def test_activation_checkpointing_gives_the_same_losses(tmp_path):
    base = ["model.args={hidden: 32, depth: 2, dropout: 0.0}"]
    assert invoke(["train", "--quiet", *mlp_args(tmp_path / "a", 6, *base)]).exit_code == 0
    r = invoke(["train", "--quiet", *mlp_args(tmp_path / "b", 6, *base, "distributed.activation_checkpointing=true")])
    assert r.exit_code == 0, r.stderr
    assert losses(tmp_path / "a") == losses(tmp_path / "b")


@pytest.mark.slow
def test_compile_trains_like_eager(tmp_path):
    base = ["model.args={hidden: 32, depth: 2, dropout: 0.0}"]
    assert invoke(["train", "--quiet", *mlp_args(tmp_path / "eager", 6, *base)]).exit_code == 0
    r = invoke(["train", "--quiet", *mlp_args(tmp_path / "compiled", 6, *base, "distributed.compile=true")])
    assert r.exit_code == 0, r.stderr
    a, b = losses(tmp_path / "eager"), losses(tmp_path / "compiled")
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-5


@pytest.mark.parametrize("launcher", ["torchrun", "slurm"])
@pytest.mark.parametrize("name", ["ddp", "fsdp"])
def test_ddp_and_fsdp_at_world_size_1_run_under_a_launcher_with_a_group(name, launcher):
    assert resolve(name, 1, launcher) == name and needs_group(name)
    with pytest.raises(UsageError, match=f"{name} needs torchrun"):
        resolve(name, 1, "single")  # no launcher at all: most likely a forgotten torchrun


def test_auto_and_single_start_no_group_at_world_size_1():
    assert resolve("auto", 1, "torchrun") == "single" and not needs_group("single")
    assert resolve("auto", 2, "torchrun") == "ddp"
    with pytest.raises(UsageError, match="single runs one process"):
        resolve("single", 2, "torchrun")
