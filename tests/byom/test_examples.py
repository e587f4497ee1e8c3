"""The third-party example models, unchanged, through single, DDP, FSDP per block, kill + resume and bf16,
and their weights back out with ``rubin export`` into a fresh instance.

nanoGPT's model.py (examples/byom/nanogpt.py) always runs; Hugging Face GPT-2 needs transformers and
torchvision's resnet18 needs a torchvision built for the installed torch: each skips with the reason.
"""

import hashlib
import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch
from train.trainhelp import events, summary
from utils import ROOT, invoke, run_rubin, run_torchrun

EXAMPLES = ROOT / "examples" / "byom"
TINY_GPT = "{n_layer: 2, n_head: 2, n_embd: 32, block_size: 16, vocab_size: 64}"
TOKENS = ["data.name=synthetic_tokens", "data.args={num_samples: 256, seq_len: 16, vocab_size: 64}", "data.batch_size=16"]


def _sets(run_dir, model_import, args, *extra):
    items = [f"run.dir={run_dir}", "run.max_steps=6", "run.epochs=null", "run.deterministic=true", "run.eval_every_steps=0",
             f"model.import={model_import}", f"model.args={args}", *TOKENS, "telemetry.log_every_steps=1",
             "checkpoint.every_steps=2", "optim.warmup_steps=1", *extra]
    return ["train", "--quiet", *[a for s in items for a in ("--set", s)]]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _digest(model) -> str:
    """The run's summary.json param_digest, recomputed from a model (same recipe as the trainer's)."""
    names = {n for n, _ in model.named_parameters()}
    h = hashlib.sha256()
    for key, t in model.state_dict().items():
        if key in names:
            t = t.detach().cpu().contiguous()
            h.update(f"{key}|{t.dtype}|{tuple(t.shape)}|".encode())
            h.update(t.view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _eval_loss(model, call) -> float:
    """Mean next-token loss of MODEL on the first 64 held-out windows of the synthetic tokens."""
    from rubin.workloads import build_data

    _, held, _ = build_data("synthetic_tokens", None, {"num_samples": 256, "seq_len": 16, "vocab_size": 64}, seed=0)
    x = torch.stack([torch.as_tensor(held[i][0]) for i in range(64)])
    y = torch.stack([torch.as_tensor(held[i][1]) for i in range(64)])
    model.eval()
    with torch.no_grad():
        logits = call(model, x, y)
    return float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)))


def _nano():
    module = _load(EXAMPLES / "nanogpt.py", "nanogpt_example")
    return module.GPT(module.GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=64))


def _export_into(run_dir, fresh, fmt="torch"):
    r = invoke(["export", run_dir, "--format", fmt, "--json"])
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    if fmt == "safetensors":
        from safetensors.torch import load_file

        state = load_file(out["path"])
    else:
        state = torch.load(out["path"], weights_only=True)
    fresh.load_state_dict(state, strict=True)  # no wrapper prefix, no missing or extra key
    return out


# -- nanoGPT: no adapter --------------------------------------------------------------------------
NANO = str(EXAMPLES / "nanogpt.py") + ":build"


@pytest.fixture(scope="module")
def nano_straight(tmp_path_factory):
    """One straight 6-step nanoGPT run in a real process, the model imported by module path from the repository
    root; shared by the module-path, single-process export and kill-and-resume tests. Returns (run dir, process)."""
    from faultkit import child_env

    run = tmp_path_factory.mktemp("nanogpt") / "straight"
    return run, run_rubin(_sets(run, "examples.byom.nanogpt:build", TINY_GPT), env=child_env(), cwd=ROOT)


def test_nanogpt_single_trains_with_every_position_and_exports(nano_straight):
    run, p = nano_straight
    assert p.returncode == 0, p.stderr
    s = summary(run)
    assert s["status"] == "completed" and s["flops_source"] == "counted"
    start = events(run, "start")[0]
    assert start["blocks"] == "transformer.h"
    fresh = _nano()
    out = _export_into(run, fresh)
    assert out["step"] == 6 and _digest(fresh) == s["param_digest"]
    if importlib.util.find_spec("safetensors"):
        again = _nano()
        _export_into(run, again, "safetensors")
        assert _digest(again) == s["param_digest"]


def test_nanogpt_bf16_learns(tmp_path):
    r = invoke(_sets(tmp_path / "run", NANO, TINY_GPT, "precision=bf16", "run.max_steps=10", "optim.lr=0.01"))
    assert r.exit_code == 0, r.stderr
    rows = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert summary(tmp_path / "run")["precision"] == "bf16"
    assert all(math.isfinite(row["loss"]) for row in rows) and rows[-1]["loss"] < rows[0]["loss"]


def test_nanogpt_killed_and_resumed_matches_straight_through(tmp_path, nano_straight):
    from faultkit import child_env

    straight, p = nano_straight  # the same model and config, imported by module path instead of by file
    assert p.returncode == 0, p.stderr
    killed = run_rubin(_sets(tmp_path / "run", NANO, TINY_GPT), env=child_env("crash@step=5"), cwd=ROOT)
    assert killed.returncode != 0 and summary(tmp_path / "run") is None
    resumed = run_rubin(_sets(tmp_path / "run", NANO, TINY_GPT), env=child_env(), cwd=ROOT)
    assert resumed.returncode == 0, resumed.stderr
    assert events(tmp_path / "run", "resume")[-1]["step"] == 4
    assert summary(tmp_path / "run")["param_digest"] == summary(straight)["param_digest"]


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_nanogpt_two_ranks_exports_consolidated_weights(tmp_path, strategy):
    args = _sets(tmp_path / "run", NANO, TINY_GPT, f"distributed.strategy={strategy}", "distributed.activation_checkpointing=true")
    p = run_torchrun(2, args, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    s = summary(tmp_path / "run")
    assert s["world_size"] == 2 and s["strategy"] == strategy
    ckpt = Path(s["checkpoint"])
    assert (ckpt / "dcp").is_dir() == (strategy == "fsdp")  # FSDP leaves shards only: export consolidates them
    assert not [e for e in events(tmp_path / "run", "warning") if "no blocks" in e.get("message", "")]
    fresh = _nano()
    _export_into(tmp_path / "run", fresh)
    assert _digest(fresh) == s["param_digest"]
    # the fresh model computes what the trained one did: its loss on held-out data is that of a trained model
    untrained = _eval_loss(_nano(), lambda m, x, y: m(x, targets=y)[0])
    trained = _eval_loss(fresh, lambda m, x, y: m(x, targets=y)[0])
    assert trained < untrained


def test_nanogpt_by_module_path_from_the_repository_root(nano_straight):
    run, p = nano_straight
    assert p.returncode == 0, p.stderr
    assert summary(run)["steps"] == 6 and events(run, "start")[0]["blocks"] == "transformer.h"


# -- Hugging Face GPT-2: no adapter -----------------------------------------------------------------
HF = str(EXAMPLES / "hf_gpt2.py") + ":build"
TINY_HF = "{n_layer: 2, n_head: 2, n_embd: 32, n_positions: 16, vocab_size: 64, bos_token_id: 0, eos_token_id: 0}"
needs_transformers = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                        reason="transformers is not installed (pip install 'rubin[byom]')")


def _hf():
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=16, vocab_size=64, bos_token_id=0, eos_token_id=0))


@needs_transformers
def test_hf_gpt2_fsdp_per_block_and_export_hf_layout(tmp_path):
    p = run_torchrun(2, _sets(tmp_path / "run", HF, TINY_HF, "distributed.strategy=fsdp", "distributed.blocks=GPT2Block"),
                     timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    s = summary(tmp_path / "run")
    assert s["strategy"] == "fsdp" and s["flops_source"] == "counted"
    assert events(tmp_path / "run", "start")[0]["blocks"] == "distributed.blocks=GPT2Block"
    r = invoke(["export", tmp_path / "run", "--format", "hf", "--to", tmp_path / "hf"])
    assert r.exit_code == 0, r.stderr
    from transformers import GPT2LMHeadModel

    loaded = GPT2LMHeadModel.from_pretrained(tmp_path / "hf")
    assert _digest(loaded) == s["param_digest"]
    assert _eval_loss(loaded, lambda m, x, y: m(x).logits) < _eval_loss(_hf(), lambda m, x, y: m(x).logits)


@needs_transformers
def test_hf_gpt2_single_ddp_bf16_and_resume(tmp_path):
    from faultkit import child_env

    single = run_rubin(_sets(tmp_path / "single", HF, TINY_HF, "distributed.activation_checkpointing=true"), env=child_env(), cwd=ROOT)
    assert single.returncode == 0, single.stderr
    assert events(tmp_path / "single", "start")[0]["blocks"] == "transformer.h"
    ddp = run_torchrun(2, _sets(tmp_path / "ddp", HF, TINY_HF, "precision=bf16", "distributed.strategy=ddp"), timeout=300)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    assert summary(tmp_path / "ddp")["precision"] == "bf16" and math.isfinite(summary(tmp_path / "ddp")["final_loss"])
    killed = run_rubin(_sets(tmp_path / "resumed", HF, TINY_HF, "distributed.activation_checkpointing=true"),
                       env=child_env("crash@step=3"), cwd=ROOT)
    assert killed.returncode != 0
    resumed = run_rubin(_sets(tmp_path / "resumed", HF, TINY_HF, "distributed.activation_checkpointing=true"), env=child_env(), cwd=ROOT)
    assert resumed.returncode == 0, resumed.stderr
    assert summary(tmp_path / "resumed")["param_digest"] == summary(tmp_path / "single")["param_digest"]


# -- torchvision resnet18: per-stage FSDP --------------------------------------------------------------
def _torchvision_reason() -> str | None:
    if importlib.util.find_spec("torchvision") is None:
        return (f"torchvision is not installed; it is a test extra that must match torch {torch.__version__} "
                "(a plain pip install pulls another torch)")
    try:
        import torchvision.models  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a torchvision built for another torch fails in many ways
        return f"torchvision does not import beside torch {torch.__version__} ({type(exc).__name__}); install the matching pair"
    return None


needs_torchvision = pytest.mark.skipif(_torchvision_reason() is not None, reason=str(_torchvision_reason()))
RESNET = str(EXAMPLES / "resnet18.py") + ":build"
IMAGES = ["data.name=synthetic_images", "data.args={num_samples: 128, image_size: 32, num_classes: 10}", "data.batch_size=16"]


def _resnet_sets(run_dir, *extra):
    items = [f"run.dir={run_dir}", "run.max_steps=4", "run.epochs=null", "run.deterministic=true", "run.eval_every_steps=0",
             f"model.import={RESNET}", "model.args={num_classes: 10}", *IMAGES, "telemetry.log_every_steps=1",
             "checkpoint.every_steps=2", "optim.warmup_steps=1", *extra]
    return ["train", "--quiet", *[a for s in items for a in ("--set", s)]]


def _resnet():
    from torchvision.models import resnet18

    return resnet18(num_classes=10)


def _image_outputs(model) -> torch.Tensor:
    torch.manual_seed(0)
    model.eval()
    with torch.no_grad():
        return model(torch.randn(4, 3, 32, 32))


@needs_torchvision
def test_resnet18_fsdp_per_stage_and_export(tmp_path):
    p = run_torchrun(2, _resnet_sets(tmp_path / "run", "distributed.strategy=fsdp", "distributed.activation_checkpointing=true"),
                     timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    s = summary(tmp_path / "run")
    assert s["strategy"] == "fsdp" and s["world_size"] == 2 and s["flops_source"] == "counted"
    assert events(tmp_path / "run", "start")[0]["blocks"] == "layer1,layer2,layer3,layer4"
    assert not [e for e in events(tmp_path / "run", "warning") if "no blocks" in e.get("message", "")]
    assert (Path(s["checkpoint"]) / "dcp").is_dir()  # shards only: export consolidates them
    fresh = _resnet()
    _export_into(tmp_path / "run", fresh)
    assert _digest(fresh) == s["param_digest"]
    assert not torch.equal(_image_outputs(fresh), _image_outputs(_resnet()))  # trained weights, not a fresh init


@needs_torchvision
def test_resnet18_single_resume_and_ddp_bf16(tmp_path):
    from faultkit import child_env

    straight = run_rubin(_resnet_sets(tmp_path / "straight"), env=child_env(), cwd=ROOT)
    assert straight.returncode == 0, straight.stderr
    assert events(tmp_path / "straight", "start")[0]["blocks"] == "layer1,layer2,layer3,layer4"
    killed = run_rubin(_resnet_sets(tmp_path / "run"), env=child_env("crash@step=3"), cwd=ROOT)
    assert killed.returncode != 0 and summary(tmp_path / "run") is None
    resumed = run_rubin(_resnet_sets(tmp_path / "run"), env=child_env(), cwd=ROOT)
    assert resumed.returncode == 0, resumed.stderr
    assert events(tmp_path / "run", "resume")[-1]["step"] == 2
    assert summary(tmp_path / "run")["param_digest"] == summary(tmp_path / "straight")["param_digest"]
    ddp = run_torchrun(2, _resnet_sets(tmp_path / "ddp", "distributed.strategy=ddp", "precision=bf16"), timeout=300)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    s = summary(tmp_path / "ddp")
    assert s["strategy"] == "ddp" and s["precision"] == "bf16" and math.isfinite(s["final_loss"])
    fresh = _resnet()
    _export_into(tmp_path / "ddp", fresh)  # no "module." prefix left from the DDP wrapper
    assert _digest(fresh) == s["param_digest"]
