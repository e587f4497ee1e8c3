"""The speedups wired into rubin train: bad input refused in one line, the fused loss and the compile
fallback train like the plain path, and a SIGKILLed run with the fused loss resumes bit-identically."""

import json

import pytest
import torch
from faultkit import events, summary, train_args
from utils import invoke, run_rubin

from rubin.errors import UsageError
from rubin.train import speed as speedups

LLAMA = ["model.name=llama", "model.args={n_layer: 2}", "data.name=synthetic_tokens",
         "data.args={num_samples: 128, seq_len: 16, vocab_size: 64}", "data.batch_size=8", "run.max_steps=6",
         "telemetry.log_every_steps=2", "checkpoint.save_final=false", "run.deterministic=true"]


def _train(tmp_path, name, *extra):
    run = tmp_path / name
    r = invoke(train_args(run, LLAMA, *extra))
    assert r.exit_code == 0, r.stderr
    return summary(run)


@pytest.mark.parametrize("items, match", [
    (["precision=fp8"], "precision=fp8 needs an NVIDIA GPU"),
    (["model.fused_loss=true", "model.name=vit", "data.name=digits"], "model.fused_loss=true: the fused loss is for"),
    (["distributed.compile=sometimes"], "distributed.compile"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, items, match):
    r = invoke(["train", "--set", f"run.dir={tmp_path / 'run'}", "--set", "run.max_steps=2",
                *[a for i in items for a in ("--set", i)]])
    assert r.exit_code == 2
    assert match in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not (tmp_path / "run" / "summary.json").exists()


def test_fused_loss_true_on_a_model_without_a_known_head_names_why():
    with pytest.raises(UsageError, match="output head cannot be found .*has no lm_head.*set model.fused_loss=false"):
        speedups._fused_head(True, torch.nn.Linear(4, 4), torch.device("cpu"), "lm")
    assert speedups._fused_head("auto", torch.nn.Linear(4, 4), torch.device("cpu"), "lm") is None


def test_auto_turns_everything_off_on_a_cpu(tmp_path):
    s = _train(tmp_path, "auto")
    assert s["fused_loss"] is False and s["compile"]["blocks"] == 0 and s["fp8_layers"] == 0


def test_the_fused_loss_trains_like_the_plain_head(tmp_path):
    plain = _train(tmp_path, "plain", "model.fused_loss=false")
    fused = _train(tmp_path, "fused", "model.fused_loss=true")
    assert fused["fused_loss"] is True and plain["fused_loss"] is False
    assert fused["final_loss"] == pytest.approx(plain["final_loss"], rel=1e-5)


def test_a_model_that_fails_to_compile_trains_eagerly_after_one_warning(tmp_path, monkeypatch):
    from rubin.train.speed import compile as comp

    def refuse(gm, example_inputs):
        raise RuntimeError("this backend cannot lower the graph")

    real = comp.compile_blocks
    monkeypatch.setattr(comp, "compile_blocks", lambda blocks, **kw: real(blocks, backend=refuse))
    eager = _train(tmp_path, "eager", "distributed.compile=false")
    fell_back = _train(tmp_path, "fallback", "distributed.compile=true")
    assert "cannot lower" in fell_back["compile"]["fallback"] and fell_back["compile"]["blocks"] == 0
    assert fell_back["compile"]["compile_s"] > 0
    assert fell_back["param_digest"] == eager["param_digest"]  # the failed attempt left nothing behind
    warnings = [e for e in events(tmp_path / "fallback") if e["kind"] == "warning" and "torch.compile" in e.get("message", "")]
    assert len(warnings) == 1


@pytest.mark.slow
def test_sigkill_with_the_fused_loss_resumes_bit_identically(tmp_path):
    cfg = [*LLAMA, "run.max_steps=12", "checkpoint.every_steps=3", "model.fused_loss=true", "data.micro_batch_size=4"]
    ref = run_rubin(train_args(tmp_path / "ref", cfg))
    assert ref.returncode == 0, ref.stderr[-2000:]
    killed = run_rubin(train_args(tmp_path / "run", cfg), env={"RUBIN_FAULT": "crash@step=7,phase=backward"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    resumed = run_rubin(train_args(tmp_path / "run", cfg))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    s = summary(tmp_path / "run")
    assert s["fused_loss"] is True and s["steps"] == 12
    assert s["param_digest"] == summary(tmp_path / "ref")["param_digest"]
    assert json.dumps([e["kind"] for e in events(tmp_path / "run")]).count("resume") == 1


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_ranks_with_the_fused_loss_follow_one_process_without_it(tmp_path, strategy):
    from trainhelp import losses
    from utils import run_torchrun

    gpt = ["model.name=gpt", "model.args={n_layer: 2, n_head: 2, n_embd: 32}", *LLAMA[2:]]
    one = invoke(train_args(tmp_path / "one", gpt, "model.fused_loss=false"))
    assert one.exit_code == 0, one.stderr
    p = run_torchrun(2, train_args(tmp_path / strategy, gpt, "model.fused_loss=true", f"distributed.strategy={strategy}"),
                     timeout=240)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    s = summary(tmp_path / strategy)
    assert s["fused_loss"] is True and s["world_size"] == 2
    a, b = losses(tmp_path / "one"), losses(tmp_path / strategy)
    assert len(a) == len(b) == 3  # logged every 2 of 6 steps
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-4  # gradients were synced through the fused head
