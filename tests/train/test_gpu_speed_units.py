"""The GPU speed pieces on a CPU: optimizer kernels, compile fallback and cache dir, the prefetcher, fp8's refusals."""

import os
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from rubin.errors import UsageError
from rubin.train.speed import compile as comp
from rubin.train.speed import fp8
from rubin.train.speed.prefetch import Prefetcher
from rubin.train.strategy import build_optimizer, impl_flags

CPU, CUDA = torch.device("cpu"), SimpleNamespace(type="cuda", index=0)


def test_optimizer_auto_is_fused_on_cuda_and_foreach_elsewhere():
    assert impl_flags("auto", CUDA) == {"fused": True}
    assert impl_flags("auto", CPU) == {"foreach": True}
    assert impl_flags("for-loop", CUDA) == {"foreach": False}
    cfg = SimpleNamespace(name="adamw", lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95), momentum=0.9, impl="auto")
    opt = build_optimizer(nn.Linear(4, 4), cfg, CPU)
    assert opt.defaults["foreach"] is True and not opt.defaults["fused"]


def test_optimizer_impls_take_the_same_step():
    torch.manual_seed(0)
    base = nn.Linear(8, 8)
    results = []
    for impl in ("foreach", "for-loop", "fused"):
        m = nn.Linear(8, 8)
        m.load_state_dict(base.state_dict())
        cfg = SimpleNamespace(name="adamw", lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95), momentum=0.9, impl=impl)
        opt = build_optimizer(m, cfg, CPU)  # fused AdamW has a CPU kernel too
        for _ in range(3):
            m(torch.ones(2, 8)).square().sum().backward()
            opt.step()
            opt.zero_grad()
        results.append(m.weight.detach().clone())
    torch.testing.assert_close(results[0], results[1])
    torch.testing.assert_close(results[0], results[2])


def test_compile_auto_only_on_cuda_and_bad_modes_are_refused():
    assert comp.wanted("auto", CUDA) and not comp.wanted("auto", CPU)
    assert comp.wanted(True, CPU) and not comp.wanted("false", CUDA)
    with pytest.raises(UsageError, match="distributed.compile"):
        comp.wanted("sometimes", CPU)


def test_cache_dir_goes_to_the_environment_unless_set(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    got = comp.use_cache_dir(tmp_path / "inductor")
    assert got.is_dir() and os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(got)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert comp.use_cache_dir(tmp_path / "other") == tmp_path / "mine"


class TwoLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def failing_backend(gm, example_inputs):
    raise RuntimeError("this backend cannot lower the graph")


def test_a_block_that_fails_to_compile_falls_back_to_eager_with_one_warning():
    torch.manual_seed(0)
    blocks = [TwoLayer()]
    eager = TwoLayer()
    eager.load_state_dict(blocks[0].state_dict())
    report = comp.CompileReport(compiled=comp.compile_blocks(blocks, backend=failing_backend))
    x = torch.randn(3, 4)
    out = comp.first_step(lambda: blocks[0](x), blocks, report)
    assert report.compiled == 0 and len(report.warnings) == 1 and "training eagerly" in report.warnings[0]
    assert "cannot lower" in report.fallback
    torch.testing.assert_close(out, eager(x))
    assert blocks[0]._compiled_call_impl is None  # later steps run eagerly too
    assert list(blocks[0].state_dict()) == ["a.weight", "a.bias", "b.weight", "b.bias"]


def test_an_error_in_the_users_code_is_not_swallowed():
    blocks = [TwoLayer()]
    report = comp.CompileReport(compiled=comp.compile_blocks(blocks, backend="eager"))

    def step():
        raise ValueError("shape mismatch in the user's forward")

    with pytest.raises(ValueError, match="user's forward"):
        comp.first_step(step, blocks, report)


def test_a_working_compile_is_timed_on_its_own():
    blocks = [TwoLayer()]
    report = comp.CompileReport(compiled=comp.compile_blocks(blocks, backend="eager"))
    comp.first_step(lambda: blocks[0](torch.randn(2, 4)).sum().backward(), blocks, report)
    assert report.compiled == 1 and report.fallback is None and report.compile_s > 0


def test_prefetcher_on_cpu_moves_batches_and_closes_the_source():
    closed = []

    def source():
        try:
            for i in range(3):
                yield torch.full((2,), i), {"y": torch.tensor([i])}
        finally:
            closed.append(True)

    p = Prefetcher(source(), CPU)
    first = next(p)
    assert first[0].tolist() == [0, 0] and first[1]["y"].tolist() == [0]
    p.close()
    assert closed == [True]


@pytest.mark.gpu
def test_prefetcher_on_cuda_yields_every_batch_in_order():
    dev = torch.device("cuda", 0)
    batches = [torch.full((1024,), float(i)).pin_memory() for i in range(5)]
    got = [int(b[0].item()) for b in Prefetcher(iter(batches), dev)]
    assert got == [0, 1, 2, 3, 4]


def test_fp8_is_refused_on_cpu_in_one_line():
    with pytest.raises(UsageError, match="precision=fp8 needs") as err:
        fp8.refuse_unless_supported(CPU)
    assert "\n" not in str(err.value) and "bf16" in str(err.value)


def test_fp8_is_refused_before_hopper(monkeypatch):
    from rubin.platform import device as dev

    monkeypatch.setattr(dev, "fp8_matmul_supported", lambda d: False)
    monkeypatch.setattr(dev, "capability", lambda d: (8, 0))
    monkeypatch.setattr(dev, "device_name", lambda d: "NVIDIA A100-SXM4-80GB")
    with pytest.raises(UsageError, match="capability 8.0") as err:
        fp8.refuse_unless_supported(CUDA)
    assert "A100" in str(err.value)


def test_fp8_converts_big_aligned_linears_and_keeps_small_ones_and_the_head():
    from rubin.workloads.models.llama import SIZES, Llama

    with torch.device("meta"):
        m = Llama(SIZES["1b"])
    take, keep = fp8.plan(m)
    assert "blocks.0.attn.wq" in take and "blocks.0.mlp.w2" in take  # 2048x2048, 8192x2048
    assert "blocks.0.attn.wk" not in take  # 512 kv features: too small to gain
    assert "lm_head" in keep and len(take) == 16 * 5
    with torch.device("meta"):
        tiny = Llama(SIZES["tiny"])
    assert fp8.plan(tiny)[0] == []


def test_fp8_swaps_the_chosen_layers_when_the_device_allows(monkeypatch):
    pytest.importorskip("torchao.float8")
    from torchao.float8.float8_linear import Float8Linear

    from rubin.platform import device as dev

    monkeypatch.setattr(dev, "fp8_matmul_supported", lambda d: True)
    m = nn.Sequential(nn.Linear(1024, 2048, bias=False), nn.Linear(2048, 16, bias=False))
    names = fp8.convert(m, CUDA)
    assert names == ["0"] and isinstance(m[0], Float8Linear) and not isinstance(m[1], Float8Linear)
    assert list(m.state_dict()) == ["0.weight", "1.weight"]  # checkpoints keep the bf16 layout
