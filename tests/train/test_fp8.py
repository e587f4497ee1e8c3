"""precision=fp8 on a CPU, through torchao's float8 emulation (no _scaled_mm): which layers convert, the
warning for a model with none, padding for a token count float8 cannot take, and a train step."""

import pytest
import torch
from faultkit import events, summary, train_args
from torch import nn
from utils import invoke

from rubin.train.speed import fp8

pytest.importorskip("torchao.float8")
from torchao.float8.float8_linear import Float8Linear  # noqa: E402

CPU = torch.device("cpu")


def test_gpt_124m_converts_its_widening_layers_by_torchaos_rule():
    from rubin.workloads import DataInfo, build_model

    with torch.device("meta"):
        gpt = build_model("gpt", {}, DataInfo.lm(1024, 50304))
    take, keep = fp8.plan(gpt)
    # qkv (768 -> 2304) and the MLP's up projection (768 -> 3072) per block; the 768-wide outputs and the head stay
    assert len(take) == 24 and all(n.endswith(("attn.qkv", "mlp.fc1")) for n in take), take
    assert "lm_head" in keep


@pytest.mark.parametrize("micro, tokens, aligned", [(1, 1000, False), (2, 1000, True), (32, 1024, True),
                                                    (3, 7, False), (16, None, True), (8, None, False)])
def test_rows_of_the_weight_gradient_must_be_a_multiple_of_16(micro, tokens, aligned):
    assert fp8.rows_aligned(micro, tokens) is aligned


def test_a_model_with_no_layer_to_convert_gets_one_warning_naming_the_threshold():
    said = []
    model = nn.Sequential(nn.Linear(64, 256), nn.Linear(256, 64))
    assert fp8.convert(model, CPU, warn=said.append, emulate=True) == []
    assert len(said) == 1 and fp8.THRESHOLD in said[0] and "precision=bf16" in said[0]
    assert not any(isinstance(m, Float8Linear) for m in model.modules())


def test_an_unaligned_token_count_pads_with_one_warning_and_trains():
    said = []
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 2048), nn.GELU(), nn.Linear(2048, 64))
    keys = list(model.state_dict())
    names = fp8.convert(model, CPU, micro_batch=1, tokens_per_sample=1000, warn=said.append, emulate=True)
    assert names == ["0"] and isinstance(model[0], Float8Linear) and not isinstance(model[2], Float8Linear)
    assert model[0].config.pad_inner_dim is True  # 1000 rows: _scaled_mm would refuse the weight gradient
    assert len(said) == 1 and "1 x 1000 tokens" in said[0] and "pad_inner_dim" in said[0]
    assert list(model.state_dict()) == keys  # checkpoints keep the bf16 layout
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, target = torch.randn(1, 1000, 64), torch.randn(1, 1000, 64)
    losses = []
    for _ in range(5):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = (model(x).float() - target).pow(2).mean()
        loss.backward()
        assert torch.isfinite(model[0].weight.grad).all()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_an_aligned_token_count_is_not_padded():
    said = []
    model = nn.Sequential(nn.Linear(64, 2048))
    fp8.convert(model, CPU, micro_batch=4, tokens_per_sample=16, warn=said.append, emulate=True)
    assert model[0].config.pad_inner_dim is False and said == []


def test_rubin_train_with_fp8_emulated_converts_pads_and_says_so(tmp_path, monkeypatch):
    """The trainer's wiring: micro-batch and sequence length reach the conversion, its warnings are events."""
    real = fp8.convert
    monkeypatch.setattr(fp8, "refuse_unless_supported", lambda device: None)
    monkeypatch.setattr(fp8, "convert", lambda model, device, **kw: real(model, device, **kw, emulate=True))
    # n_embd 272: the MLP's up projection (272 -> 1088) converts; micro-batch 3 x 10 tokens is 30 rows
    cfg = ["model.name=gpt", "model.args={n_layer: 1, n_head: 2, n_embd: 272}", "data.name=synthetic_tokens",
           "data.args={num_samples: 96, seq_len: 10, vocab_size: 64}", "data.batch_size=3", "run.max_steps=4",
           "precision=fp8", "checkpoint.save_final=false", "telemetry.log_every_steps=2"]
    r = invoke(train_args(tmp_path / "run", cfg))
    assert r.exit_code == 0, r.stderr
    s = summary(tmp_path / "run")
    assert s["fp8_layers"] == 1 and s["precision"] == "fp8" and s["status"] == "completed"
    warned = [e["message"] for e in events(tmp_path / "run") if e["kind"] == "warning" and "fp8" in e["message"]]
    assert len(warned) == 1 and "3 x 10 tokens" in warned[0]
