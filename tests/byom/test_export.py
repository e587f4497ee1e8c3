"""rubin export: the newest verified checkpoint, clean keys, atomic write, one-line refusals."""

import builtins
import json

import pytest
import torch
from train.trainhelp import mlp_args, summary
from utils import invoke

from rubin.train.checkpoint.export import clean_key


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("export") / "run"
    r = invoke(["train", "--quiet", *mlp_args(run_dir, 6, "checkpoint.every_steps=3", "checkpoint.keep_last=3")])
    assert r.exit_code == 0, r.stderr
    return run_dir


def _fresh_mlp():
    from rubin.workloads import DataInfo, build_model

    return build_model("mlp", {"hidden": 32, "depth": 2}, DataInfo.classification((16,), 4))


@pytest.mark.parametrize("key,clean", [
    ("module.net.0.weight", "net.0.weight"),                                    # DDP
    ("_orig_mod.blocks.0.fc.weight", "blocks.0.fc.weight"),                     # torch.compile
    ("blocks.0._checkpoint_wrapped_module.fc.weight", "blocks.0.fc.weight"),    # checkpoint_wrapper
    ("module._orig_mod.h.1._fsdp_wrapped_module.attn.bias", "h.1.attn.bias"),   # all of them
    ("encoder.module.weight", "encoder.module.weight"),                         # the user's own 'module' stays
])
def test_wrapper_segments_are_removed(key, clean):
    assert clean_key(key) == clean


def test_export_loads_strictly_into_a_fresh_model_with_the_trained_outputs(run, tmp_path):
    r = invoke(["export", run, "--to", tmp_path / "w.pt", "--json"])
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["version"] == 1 and out["step"] == 6 and out["format"] == "torch"
    model = _fresh_mlp()
    model.load_state_dict(torch.load(tmp_path / "w.pt", weights_only=True), strict=True)
    trained = torch.load(run / "checkpoints" / "step-00000006" / "model.pt", weights_only=True)
    x = torch.randn(5, 16)
    reference = _fresh_mlp()
    reference.load_state_dict(trained)
    assert torch.equal(model(x), reference(x))
    assert summary(run)["param_digest"]  # the run finished; export changed none of it
    assert not list(tmp_path.glob(".w.pt.tmp-*"))


def test_a_corrupted_newest_checkpoint_is_skipped_and_named(run, tmp_path):
    target = run / "checkpoints" / "step-00000006" / "model.pt"
    saved = target.read_bytes()
    try:
        target.write_bytes(saved[:-7] + b"garbage")
        r = invoke(["export", run, "--to", tmp_path / "w.pt"])
        assert r.exit_code == 0, r.stderr
        assert "from step 3" in r.stdout and "skipped a newer checkpoint that does not verify: step-00000006" in r.stdout
    finally:
        target.write_bytes(saved)


def test_existing_target_needs_force_and_force_replaces_it(run, tmp_path):
    (tmp_path / "w.pt").write_text("keep me")
    r = invoke(["export", run, "--to", tmp_path / "w.pt"])
    assert r.exit_code == 2 and "already exists" in r.stderr and (tmp_path / "w.pt").read_text() == "keep me"
    assert invoke(["export", run, "--to", tmp_path / "w.pt", "--force"]).exit_code == 0
    assert isinstance(torch.load(tmp_path / "w.pt", weights_only=True), dict)


def test_refusals_are_one_line(run, tmp_path, monkeypatch):
    cases = [
        (["export", tmp_path / "nope"], 2, "is not a directory"),
        (["export", tmp_path], 1, "has no verified checkpoint to export"),
        (["export", run, "--format", "onnx"], 2, "--format='onnx' is not valid"),
        (["export", run, "--format", "hf", "--to", tmp_path / "hf"], 2, "trained rubin's built-in model 'mlp'"),
    ]
    for args, code, text in cases:
        r = invoke(args)
        assert r.exit_code == code and text in r.stderr and r.stderr.count("\n") == 1, (args, r.stderr)
    real_import = builtins.__import__

    def no_safetensors(name, *a, **kw):
        if name.startswith("safetensors"):
            raise ImportError(name)
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_safetensors)
    r = invoke(["export", run, "--format", "safetensors", "--to", tmp_path / "w.safetensors"])
    assert r.exit_code == 2 and "needs the 'safetensors' package" in r.stderr


@pytest.mark.skipif(__import__("importlib").util.find_spec("transformers") is None, reason="transformers is not installed")
def test_hf_layout_for_an_hf_model_inside_the_users_wrapper(tmp_path, monkeypatch):
    (tmp_path / "wrapped.py").write_text(
        "from torch import nn\n"
        "from transformers import GPT2Config, GPT2LMHeadModel\n"
        "class Wrapper(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.net = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, n_positions=8, vocab_size=32,\n"
        "                                              bos_token_id=0, eos_token_id=0))\n"
        "    def forward(self, x):\n"
        "        return self.net(x)\n"
        "def build():\n"
        "    return Wrapper()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sets = [f"run.dir={tmp_path / 'run'}", "run.max_steps=2", "run.epochs=null", "model.import=wrapped:build", "model.args={}",
            "data.name=synthetic_tokens", "data.args={num_samples: 32, seq_len: 8, vocab_size: 32}", "data.batch_size=8"]
    try:
        r = invoke(["train", "--quiet", *[a for s in sets for a in ("--set", s)]])
        assert r.exit_code == 0, r.stderr
        r = invoke(["export", tmp_path / "run", "--format", "hf", "--to", tmp_path / "hf", "--json"])
        assert r.exit_code == 0, r.stderr
        assert json.loads(r.stdout)["hf_submodule"] == "net"
        from transformers import GPT2LMHeadModel

        loaded = GPT2LMHeadModel.from_pretrained(tmp_path / "hf")
        trained = torch.load(next((tmp_path / "run" / "checkpoints").glob("step-*")) / "model.pt", weights_only=True)
        for key, value in loaded.state_dict().items():
            assert torch.equal(value, trained[f"net.{key}"]), key
    finally:
        import sys

        sys.modules.pop("wrapped", None)
