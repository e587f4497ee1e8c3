"""Regional compile reports what dynamo really compiled: activation checkpointing traces, new eval shapes
recompile once, and dynamo's eager fallbacks are one warning. backend="eager": dynamo traces, no inductor."""

import pytest
import torch

from rubin.train.speed import compile as comp
from rubin.workloads import DataInfo, build_model
from rubin.workloads.contract.blocks import apply_activation_checkpointing


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """dynamo's caches and counters are per process: each test starts from none."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _gpt(layers: int = 4):
    torch.manual_seed(0)
    return build_model("gpt", {"n_layer": layers, "n_head": 2, "n_embd": 32}, DataInfo.lm(16, 64))


def _train_step(model, batch: int = 8):
    out = model(torch.randint(0, 64, (batch, 16)))
    out.float().sum().backward()


def test_activation_checkpointing_with_regional_compile_traces_one_graph_for_every_block():
    model = _gpt(layers=4)
    blocks = model.model_blocks()
    apply_activation_checkpointing(blocks)
    report = comp.CompileReport(compiled=comp.compile_blocks(blocks, backend="eager"))
    comp.first_step(lambda: _train_step(model), blocks, report)
    assert report.frames >= 1 and report.graphs == 1  # one frame traced, its graph reused by the 4 blocks
    assert report.compiled == 4 and report.fallback is None and report.warnings == []
    assert all(b._compiled_call_impl is not None for b in blocks)


def test_compile_that_traces_nothing_says_so_and_reports_no_blocks():
    class Opaque(torch.nn.Module):  # a forward dynamo never enters, as the old checkpoint partial was
        @torch._disable_dynamo
        def forward(self, x):
            return x * 2

    blocks = [Opaque()]
    report = comp.CompileReport(compiled=comp.compile_blocks(blocks, backend="eager"))
    comp.first_step(lambda: blocks[0](torch.ones(2)), blocks, report)
    assert report.compiled == 0 and report.frames == 0
    assert report.fallback == "dynamo traced no frame of the compiled blocks"
    assert len(report.warnings) == 1 and "traced nothing" in report.warnings[0]
    assert blocks[0]._compiled_call_impl is None


def test_eval_batches_of_new_sizes_recompile_once_not_once_per_size():
    """A partial last eval batch, and a user's batches of varying size: automatic dynamic shapes make the
    batch dimension dynamic at its first change (dynamic=False compiled one static graph per size)."""
    model = _gpt(layers=2)
    blocks = model.model_blocks()
    report = comp.CompileReport(compiled=comp.compile_blocks(blocks, backend="eager"))
    comp.first_step(lambda: _train_step(model), blocks, report)
    assert report.graphs == 1
    model.eval()
    with torch.no_grad():
        for size in (8, 5, 3, 7, 6, 2):
            model(torch.randint(0, 64, (size, 16)))
    report.read()
    assert report.graphs == 3  # training, eval at the training size, eval with a dynamic batch
    assert report.recompiles == 2 and report.frames_eager == 0 and report.warnings == []


@torch._dynamo.config.patch(recompile_limit=1)
def test_dynamo_running_a_frame_eagerly_is_one_warning():
    model = _gpt(layers=2)
    blocks = model.model_blocks()
    report = comp.CompileReport(compiled=comp.compile_blocks(blocks, backend="eager"))
    comp.first_step(lambda: _train_step(model), blocks, report)
    with torch.no_grad():
        model.eval()
        model(torch.randint(0, 64, (5, 16)))  # a recompile past the limit: dynamo runs this eagerly
        first = report.read()
        model(torch.randint(0, 64, (3, 16)))
        again = report.read()
    assert report.frames_eager >= 1 and len(first) == 1 and "fell back to eager" in first[0]
    assert again == [] and report.fallback.startswith("dynamo ran")
    assert report.as_dict()["frames_eager"] == report.frames_eager
