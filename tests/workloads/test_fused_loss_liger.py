"""model.fused_loss=liger: which fused loss a run gets, and the one-line refusals. Liger-Kernel is Triton
(CUDA only) and is not installed here: a stand-in module with its class's call signature checks the wiring."""

import sys
import types
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from utils import invoke

from rubin.errors import UsageError
from rubin.train import speed as speedups
from rubin.workloads import DataInfo, build_model
from rubin.workloads.fused_loss import fused_lm_loss, liger_missing

CUDA, CPU = SimpleNamespace(type="cuda"), torch.device("cpu")
calls = []


class FakeLigerLoss(torch.nn.Module):
    """Liger's ``LigerFusedLinearCrossEntropyLoss``: forward(lin_weight, _input, target), the mean over non-ignored."""

    def __init__(self, ignore_index=-100, reduction="mean"):
        super().__init__()
        self.ignore_index, self.reduction = ignore_index, reduction

    def forward(self, lin_weight, _input, target):
        calls.append((tuple(lin_weight.shape), tuple(_input.shape), tuple(target.shape), _input.dtype))
        return F.cross_entropy(F.linear(_input, lin_weight).float(), target, ignore_index=self.ignore_index)


@pytest.fixture
def liger(monkeypatch):
    pkg, sub = types.ModuleType("liger_kernel"), types.ModuleType("liger_kernel.transformers")
    sub.LigerFusedLinearCrossEntropyLoss = FakeLigerLoss
    pkg.transformers = sub
    monkeypatch.setitem(sys.modules, "liger_kernel", pkg)
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", sub)
    calls.clear()
    yield


def _gpt():
    torch.manual_seed(0)
    return build_model("gpt", {"n_layer": 1, "n_head": 2, "n_embd": 32}, DataInfo.lm(16, 64))


def _impl(mode, device):
    head = speedups._fused_head(mode, _gpt(), device, "lm")
    return None if head is None else head.impl


def test_liger_is_not_installed_here_and_says_why():
    assert "liger_kernel" in liger_missing()


def test_auto_takes_liger_on_cuda_when_it_imports_and_rubins_otherwise(liger):
    assert _impl("auto", CUDA) == "liger" and _impl("liger", CUDA) == "liger"
    assert _impl(True, CUDA) == "rubin"  # true is rubin's own, the CPU path and the oracle
    assert _impl("auto", CPU) is None and _impl(False, CUDA) is None


def test_auto_without_liger_is_rubins_own_on_cuda():
    assert _impl("auto", CUDA) == "rubin"


def test_liger_asked_for_without_it_is_one_line():
    with pytest.raises(UsageError, match=r"model.fused_loss=liger needs Liger-Kernel, which does not import here "
                                         r"\(ModuleNotFoundError.*pip install 'rubin\[liger\]'") as err:
        speedups._fused_head("liger", _gpt(), CUDA, "lm")
    assert "\n" not in str(err.value)


def test_liger_on_a_cpu_is_one_line_even_when_installed(liger):
    with pytest.raises(UsageError, match="runs Liger-Kernel's Triton kernels on a CUDA GPU and this run is on cpu"):
        speedups._fused_head("liger", _gpt(), CPU, "lm")


def test_the_liger_head_hands_liger_the_flat_tokens_and_gives_the_plain_loss(liger):
    model = _gpt()
    idx, target = torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 16))
    plain = F.cross_entropy(model(idx).float().reshape(-1, 64), target.reshape(-1))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = fused_lm_loss(model, idx, target, impl="liger")
    # (weight, hidden, target) in Liger's order, flattened, in the autocast dtype a plain Linear would see
    assert calls == [((64, 32), (32, 32), (32,), torch.bfloat16)]
    assert float(loss) == pytest.approx(float(plain), rel=2e-2)


def test_rubin_train_with_fused_loss_liger_on_a_cpu_exits_2(tmp_path):
    r = invoke(["train", "--quiet", "--set", f"run.dir={tmp_path / 'run'}", "--set", "model.name=gpt",
                "--set", "model.args={n_layer: 1, n_head: 2, n_embd: 32}", "--set", "data.name=synthetic_tokens",
                "--set", "run.max_steps=1", "--set", "model.fused_loss=liger"])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert "model.fused_loss=liger runs Liger-Kernel's Triton kernels on a CUDA GPU" in r.stderr
