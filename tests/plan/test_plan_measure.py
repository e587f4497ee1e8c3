"""``rubin plan memory --measure`` and the instrument under it (``rubin.plan.measure``)."""

import json
import sys

import pytest
from utils import ROOT, invoke

NANOGPT = ROOT / "examples" / "byom" / "nanogpt.py"


def test_saved_bytes_of_a_known_graph():
    """Linear(256 -> 128, no bias) + rubin's loss: autograd keeps the input and the fp32 log-probs (and the targets)."""
    import torch

    from rubin.plan.measure import measure_step

    model = torch.nn.Linear(256, 128, bias=False)
    x, y = torch.randn(64, 256), torch.randint(0, 128, (64,))
    r = measure_step(model, x, y, task="classification", device=torch.device("cpu"))
    # x: 64*256*4, log_softmax output: 64*128*4, int64 targets: 64*8, nll_loss's fp32 total weight: 4;
    # the weight is a parameter, not counted
    assert r.saved_bytes == 64 * 256 * 4 + 64 * 128 * 4 + 64 * 8 + 4
    # resident: the weight and AdamW's two moments, 3 * 128*256*4, and its fp32 step counter
    assert r.resident_bytes == 3 * 128 * 256 * 4 + 4
    assert r.peak_bytes > r.resident_bytes + r.saved_bytes  # gradients and temporaries come on top


def test_autocast_copies_of_weights_are_not_activations():
    import torch

    from rubin.plan.measure import measure_step

    model = torch.nn.Linear(256, 128, bias=False)
    x, y = torch.randn(64, 256), torch.randint(0, 128, (64,))
    r = measure_step(model, x, y, task="classification", precision="bf16", device=torch.device("cpu"))
    # the bf16 copy of x (2 B), fp32 log-probs, targets; the bf16 copy of the weight is a model state
    assert r.saved_bytes == 64 * 256 * 2 + 64 * 128 * 4 + 64 * 8 + 4


def _measure(args):
    r = invoke(["plan", "memory", "--measure", "--json", *args])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_measure_a_builtin_workload_extrapolates_linearly():
    base = ["--workload", "mlp", "--image-size", "8", "--channels", "1", "--gpu-memory-gib", "1", "--gpus", "1",
            "--precision", "fp32"]
    one = _measure(base + ["--micro-batch", "100"])
    two = _measure(base + ["--micro-batch", "200"])
    fit = one["model"]["measured"]["fit"]["none"]
    assert fit["residual"] < 0.02
    a1, a2 = (next(r for r in x["strategies"] if r["strategy"] == "single")["activations"]["saved_bytes"]
              for x in (one, two))
    assert a2 == pytest.approx(2 * a1, rel=1e-6)  # no batch-independent term in the fit
    assert any("measured on CPU" in n and "fit residual" in n for n in one["notes"])


def _nanogpt_args():
    return ["--import", f"{NANOGPT}:build", "--model-arg", "n_layer=2", "--model-arg", "n_head=2",
            "--model-arg", "n_embd=64", "--model-arg", "block_size=128", "--model-arg", "vocab_size=256",
            "--model-arg", "dropout=0.0", "--vocab", "256", "--seq-len", "128", "--gpus", "1", "--gpu-memory-gib", "1",
            "--overhead-gib", "0"]


@pytest.mark.skipif(not NANOGPT.exists(), reason="examples/byom/nanogpt.py not present")
def test_measure_nanogpt_from_an_import_path_matches_a_real_step_at_the_target():
    """--measure fits at seq 32/64 and micro-batch 2/4; the plan at seq 128, b 8 is checked against a real step there."""
    import importlib.util

    import torch

    from rubin.plan.measure import measure_step

    res = _measure(_nanogpt_args() + ["--micro-batch", "8", "--precision", "fp32"])
    row = next(r for r in res["strategies"] if r["strategy"] == "single")
    assert "flash" in " ".join(res["notes"])
    spec = importlib.util.spec_from_file_location("nanogpt_check", NANOGPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["nanogpt_check"] = mod
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    model = mod.build(n_layer=2, n_head=2, n_embd=64, block_size=128, vocab_size=256, dropout=0.0)
    x, y = torch.randint(0, 256, (8, 128)), torch.randint(0, 256, (8, 128))
    truth = measure_step(model, x, y, task="lm", device=torch.device("cpu"), wrap=lambda m: (lambda t: m(t, targets=y)))
    print(f"saved {row['activations']['saved_bytes'] / truth.saved_bytes - 1:+.1%}, "
          f"peak {row['total_bytes'] / truth.peak_bytes - 1:+.1%} ({truth.kernel})")
    assert row["activations"]["saved_bytes"] == pytest.approx(truth.saved_bytes, rel=0.03)
    # the truth is a CPU step: no cuBLAS workspace, which the plan adds for its GPU target
    assert row["total_bytes"] - row["workspace_bytes"] == pytest.approx(truth.peak_bytes, rel=0.05)


def test_measure_hf_gpt2_matches_a_real_step_at_the_target():
    pytest.importorskip("transformers", reason="transformers is not installed (pip install transformers)")
    import torch

    from rubin.plan.measure import measure_step

    cfg = dict(n_layer=2, n_head=2, n_embd=64, vocab_size=256, n_positions=128, bos_token_id=0, eos_token_id=0)
    res = _measure(["--import", f"{ROOT / 'examples' / 'byom' / 'hf_gpt2.py'}:build",
                    *[a for k, v in cfg.items() for a in ("--model-arg", f"{k}={v}")], "--vocab", "256",
                    "--seq-len", "128", "--micro-batch", "8", "--gpus", "1", "--gpu-memory-gib", "1",
                    "--overhead-gib", "0", "--precision", "fp32"])
    print(res["notes"][0])
    assert res["model"]["measured"]["fit"]["none"]["residual"] < 0.05
    assert res["model"]["layers"] == 2  # transformer.h found as the blocks
    assert res["recommended"] == "single"
    row = next(r for r in res["strategies"] if r["strategy"] == "single")
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(**cfg))
    x, y = torch.randint(0, 256, (8, 128)), torch.randint(0, 256, (8, 128))
    truth = measure_step(model, x, y, task="lm", device=torch.device("cpu"))
    print(f"saved {row['activations']['saved_bytes'] / truth.saved_bytes - 1:+.1%}, "
          f"peak {row['total_bytes'] / truth.peak_bytes - 1:+.1%} ({truth.kernel})")
    assert row["activations"]["saved_bytes"] == pytest.approx(truth.saved_bytes, rel=0.03)
    # the truth is a CPU step: no cuBLAS workspace, which the plan adds for its GPU target
    assert row["total_bytes"] - row["workspace_bytes"] == pytest.approx(truth.peak_bytes, rel=0.05)


def test_measure_torchvision_resnet18():
    pytest.importorskip("torchvision", reason="torchvision is not installed (no build matches this torch)")
    res = _measure(["--import", f"{ROOT / 'examples' / 'byom' / 'resnet18.py'}:build", "--model-arg", "num_classes=10",
                    "--task", "classification", "--image-size", "32", "--channels", "3", "--gpus", "1",
                    "--gpu-memory-gib", "4", "--precision", "fp32"])
    assert res["model"]["measured"]["fit"]["none"]["residual"] < 0.05


@pytest.mark.parametrize("args,match", [
    (["--import", "nosuchmodule_xyz:build", "--vocab", "10"], "module 'nosuchmodule_xyz' not found"),
    (["--workload", "gpt", "--import", "a:b"], "--workload NAME or --import"),
    (["--workload", "gtp"], "did you mean 'gpt'"),
    (["--workload", "mlp", "--params", "7e9"], "drop --params"),
])
def test_measure_bad_input_is_one_line(args, match):
    r = invoke(["plan", "memory", "--measure", *args])
    assert r.exit_code == 2, r.stderr
    assert match in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_import_without_measure_says_so():
    r = invoke(["plan", "memory", "--import", "a:b"])
    assert r.exit_code == 2 and "add --measure" in r.stderr


def test_gpu_path_reads_the_allocator_peak_through_the_device_seam(monkeypatch):
    import torch

    from rubin.plan import measure
    from rubin.platform import device as dev

    calls = []

    class Dev:  # a CUDA-looking device object over CPU tensors
        type = "cuda"
        index = 0

    monkeypatch.setattr(dev, "synchronize", lambda d: None)
    monkeypatch.setattr(dev, "reset_peak_memory", lambda d: calls.append("reset"))
    monkeypatch.setattr(dev, "peak_memory_bytes", lambda d: calls.append("peak") or 123_456_789)
    monkeypatch.setattr(dev, "allocated_bytes", lambda d: 10_000)
    monkeypatch.setattr(torch, "autocast", lambda *a, **k: __import__("contextlib").nullcontext())
    model = torch.nn.Linear(16, 4)
    r = measure.measure_step(model, torch.randn(8, 16), torch.randint(0, 4, (8,)), task="classification",
                             precision="bf16", device=Dev())
    assert calls[0] == "reset" and calls.count("peak") == 2  # after backward, then after the optimizer step
    # absolute counters, less what was allocated before besides the weights (Linear(16, 4): 68 fp32 parameters)
    assert r.peak_bytes == 123_456_789 - (10_000 - 68 * 4) and r.device == "cuda"
    assert r.resident_bytes == 68 * 4  # the fake counter did not move: weights only


def test_measure_a_cnn_extrapolates_to_a_real_step_at_the_target():
    """Stand-in for torchvision's resnet18 where it cannot be installed: rubin's ResNet-18 layout (narrow),
    fitted at micro-batches 2 and 4, planned at 16 and checked against a real step at 16."""
    import torch

    from rubin.plan.measure import measure_step
    from rubin.workloads import DataInfo, build_model

    res = _measure(["--workload", "resnet", "--model-arg", "width=8", "--image-size", "32", "--channels", "3",
                    "--micro-batch", "16", "--gpus", "1", "--gpu-memory-gib", "1", "--overhead-gib", "0",
                    "--precision", "fp32"])
    row = next(r for r in res["strategies"] if r["strategy"] == "single")
    torch.manual_seed(0)
    model = build_model("resnet", {"width": 8}, DataInfo.classification((3, 32, 32), 10))
    truth = measure_step(model, torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,)), task="classification",
                         device=torch.device("cpu"))
    print(f"saved {row['activations']['saved_bytes'] / truth.saved_bytes - 1:+.1%}, "
          f"peak {row['total_bytes'] / truth.peak_bytes - 1:+.1%} ({truth.kernel})")
    assert row["activations"]["saved_bytes"] == pytest.approx(truth.saved_bytes, rel=0.03)
    # the truth is a CPU step: no cuBLAS workspace, which the plan adds for its GPU target
    assert row["total_bytes"] - row["workspace_bytes"] == pytest.approx(truth.peak_bytes, rel=0.05)


def test_cpu_autocast_softmax_in_16_bit_is_corrected_to_cuda_fp32_size():
    """CPU autocast leaves softmax in bf16; CUDA's runs it in fp32 and saves 4 B per element, not 2."""
    import torch

    from rubin.plan.measure import cuda_correction, cuda_differences, forward_saved

    class Scores(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q = torch.nn.Linear(32, 32, bias=False)

        def forward(self, x):
            h = self.q(x)  # bf16 under autocast
            p = torch.softmax(h @ h.transpose(1, 2), dim=-1)  # (b, s, s) in bf16 on the CPU
            return (p @ h).mean(1)

    model = Scores()
    x, y = torch.randn(2, 16, 32), torch.randint(0, 32, (2,))
    _, names = forward_saved(model, x, y, task="classification", precision="bf16", ops=True)
    assert cuda_correction(names) == 2 * (2 * 16 * 16)  # 2 extra bytes per softmax element
    assert cuda_differences(names, "bf16") == ["aten::_softmax ran in 16-bit on the CPU; CUDA autocast runs it in fp32"]
