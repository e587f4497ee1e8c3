"""Reference models: shapes, FLOPs against FlopCounterMode, causality, weight tying, blocks, args."""

import pytest
import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from rubin.errors import UsageError
from rubin.workloads import DataInfo, build_model, flops_per_sample, model_blocks
from rubin.workloads.models import GPTConfig


@pytest.fixture(autouse=True)
def _one_thread():
    # These tiny models run faster on one thread, and a shared CI machine's cores are oversubscribed.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


DIGITS = DataInfo.classification((1, 8, 8), 10)
TOKENS = DataInfo.lm(16, 64)
TINY_GPT = {"n_layer": 2, "n_head": 2, "n_embd": 32}


def counted_training_flops(model, x) -> float:
    """FlopCounterMode's forward count per sample, times 3. The math SDPA backend is forced
    because FlopCounterMode has no formula for the fused CPU attention kernel."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(x)
    return 3 * counter.get_total_flops() / x.shape[0]


CASES = [
    ("vit", {}, DIGITS, lambda: torch.randn(2, 1, 8, 8)),
    ("vit", {"patch_size": 4, "dim": 48, "heads": 3, "mlp_ratio": 4.0},
     DataInfo.classification((3, 16, 16), 5), lambda: torch.randn(2, 3, 16, 16)),
    ("gpt", TINY_GPT, TOKENS, lambda: torch.randint(0, 64, (2, 16))),
    ("resnet", {"layout": 18, "width": 8}, DataInfo.classification((3, 16, 16), 10), lambda: torch.randn(2, 3, 16, 16)),
    ("resnet", {"layout": 50, "width": 8, "small_input": False}, DataInfo.classification((3, 40, 40), 7),
     lambda: torch.randn(2, 3, 40, 40)),
    ("mlp", {"hidden": 32, "depth": 3}, DataInfo.classification((3, 4, 4), 10), lambda: torch.randn(2, 3, 4, 4)),
]


@pytest.mark.parametrize("name,args,info,make_x", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_flops_formula_matches_flop_counter(name, args, info, make_x):
    torch.manual_seed(0)
    model = build_model(name, args, info)
    formula = flops_per_sample(model, info)
    assert formula == model.flops_per_sample()
    assert formula == pytest.approx(counted_training_flops(model, make_x()), rel=0.01)


def test_gpt_training_flops_match_counted_forward_and_backward():
    model = build_model("gpt", TINY_GPT, TOKENS)
    x = torch.randint(0, 64, (2, 16))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    assert model.flops_per_sample() == pytest.approx(counter.get_total_flops() / 2, rel=0.02)


def test_resnet_forward_flops_are_the_published_figures():
    # torchvision / the ResNet paper: ResNet-18 1.8 GMACs, ResNet-50 4.1 GMACs at 224x224.
    imagenet = DataInfo.classification((3, 224, 224), 1000)
    with torch.device("meta"):
        r18 = build_model("resnet", {"layout": 18}, imagenet)
        r50 = build_model("resnet", {"layout": 50}, imagenet)
    assert r18.flops_per_sample() / 3 / 2 == pytest.approx(1.814e9, rel=0.005)
    assert r50.flops_per_sample() / 3 / 2 == pytest.approx(4.089e9, rel=0.005)
    assert sum(p.numel() for p in r18.parameters()) == 11_689_512
    assert sum(p.numel() for p in r50.parameters()) == 25_557_032


def test_gpt_defaults_are_gpt2_small():
    assert GPTConfig() == GPTConfig(n_layer=12, n_head=12, n_embd=768, vocab_size=50304, block_size=1024,
                                    dropout=0.0, bias=True)
    with torch.device("meta"):
        model = build_model("gpt", {}, DataInfo.lm(1024, 50304))
    assert model.num_params() == pytest.approx(124e6, rel=0.01)
    n, t, c = model.num_params(), 1024, model.config
    palm = 6 * n * t + 12 * c.n_layer * c.n_embd * t * t  # PaLM appendix B, per sequence
    assert model.flops_per_sample() == pytest.approx(palm, rel=0.01)


def test_gpt_is_causal():
    torch.manual_seed(0)
    model = build_model("gpt", TINY_GPT, TOKENS).eval()
    x = torch.randint(0, 64, (1, 16))
    changed = x.clone()
    changed[0, 9:] = (changed[0, 9:] + 7) % 64
    a, b = model(x), model(changed)
    assert a.shape == (1, 16, 64)
    assert torch.allclose(a[0, :9], b[0, :9], atol=1e-6)
    assert not torch.allclose(a[0, 9:], b[0, 9:], atol=1e-3)


def test_gpt_ties_embedding_and_head():
    model = build_model("gpt", TINY_GPT, TOKENS)
    assert model.lm_head.weight is model.wte.weight
    names = [n for n, _ in model.named_parameters()]
    assert "lm_head.weight" not in names and "wte.weight" in names


def test_gpt_block_size_and_vocab_come_from_the_data():
    model = build_model("gpt", TINY_GPT, DataInfo.lm(24, 300))
    assert (model.config.block_size, model.config.vocab_size) == (24, 300)
    with pytest.raises(UsageError, match=r"model\.args\.block_size=8 .*seq_len 24"):
        build_model("gpt", {**TINY_GPT, "block_size": 8}, DataInfo.lm(24, 300))


def test_image_models_output_class_logits_and_train():
    torch.manual_seed(0)
    for name, args in (("vit", {}), ("resnet", {"width": 8}), ("mlp", {})):
        model = build_model(name, args, DIGITS)
        x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,))
        assert model(x).shape == (8, 10)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        losses = []
        for _ in range(20):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[-1] < 0.5 * losses[0], name


def test_resnet_small_input_is_chosen_from_the_image_size():
    small = build_model("resnet", {"width": 8}, DataInfo.classification((3, 32, 32), 10))
    big = build_model("resnet", {"width": 8}, DataInfo.classification((3, 128, 128), 10))
    assert small.stem[0].kernel_size == (3, 3) and len(small.stem) == 3
    assert big.stem[0].kernel_size == (7, 7) and isinstance(big.stem[-1], nn.MaxPool2d)


def test_model_blocks_are_the_repeated_blocks():
    vit = build_model("vit", {"depth": 3}, DIGITS)
    assert model_blocks(vit) == list(vit.blocks) and len(vit.blocks) == 3
    gpt = build_model("gpt", TINY_GPT, TOKENS)
    assert [type(b).__name__ for b in model_blocks(gpt)] == ["Block", "Block"]
    r18 = build_model("resnet", {"layout": 18, "width": 8}, DIGITS)
    r50 = build_model("resnet", {"layout": 50, "width": 8}, DIGITS)
    assert [type(b).__name__ for b in model_blocks(r18)] == ["BasicBlock"] * 8
    assert [type(b).__name__ for b in model_blocks(r50)] == ["Bottleneck"] * 16
    mlp = build_model("mlp", {"depth": 3}, DIGITS)
    assert len(model_blocks(mlp)) == 3 and all(isinstance(b[0], nn.Linear) for b in model_blocks(mlp))


def test_model_blocks_of_user_models():
    class HF(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.Module()
            self.transformer.h = nn.ModuleList(nn.Linear(2, 2) for _ in range(3))

    assert len(model_blocks(HF())) == 3
    assert model_blocks(nn.Linear(2, 2)) == []
    vit = build_model("vit", {}, DIGITS)
    wrapped = nn.Module()
    wrapped.module = vit  # what DDP looks like
    assert model_blocks(wrapped) == list(vit.blocks)


def test_flops_of_user_models():
    class Says(nn.Linear):
        def flops_per_sample(self, info):
            return 6.0 * info.input_shape[0]

    class Attr(nn.Linear):
        flops_per_sample = 123.0

    assert flops_per_sample(Says(2, 2), DataInfo.classification((5,), 2)) == 30.0
    assert flops_per_sample(Attr(2, 2), None) == 123.0
    assert flops_per_sample(nn.Linear(2, 2), DIGITS) is None


def test_unknown_model_suggests_the_name():
    with pytest.raises(UsageError, match=r"model\.name='vitt' .*did you mean 'vit'.*allowed: vit, resnet, gpt, llama, mlp"):
        build_model("vitt", {}, DIGITS)


def test_unknown_model_argument_names_it_and_the_allowed_ones():
    with pytest.raises(UsageError, match=r"model\.args\.patchsize .*did you mean 'patch_size'.*allowed: .*depth"):
        build_model("vit", {"patchsize": 2}, DIGITS)


@pytest.mark.parametrize("name,args,info,match", [
    ("vit", {"patch_size": 3}, DIGITS, r"model\.args\.patch_size=3 .*divide the image size 8x8"),
    ("vit", {"dim": 30, "heads": 4}, DIGITS, r"model\.args\.heads=4 .*dim=30"),
    ("vit", {"depth": "4"}, DIGITS, r"model\.args\.depth='4' is not valid: an integer \(default 4\); e\.g\. --set model\.args\.depth=4"),
    ("mlp", {"num_classes": 5}, DIGITS, r"model\.args\.num_classes=5 .*at least the data's 10 classes"),
    ("resnet", {"small_input": "yes"}, DIGITS, r"model\.args\.small_input='yes' .*true, false or null"),
    ("resnet", {"layout": 34}, DIGITS, r"model\.args\.layout=34 .*18 .* or 50"),
    ("gpt", {}, DIGITS, r"model\.name='gpt' .*needs lm data"),
    ("vit", {}, TOKENS, r"model\.name='vit' .*needs classification data.*model\.name=gpt"),
    ("vit", {}, DataInfo.classification((12,), 3), r"needs \(C, H, W\) images"),
])
def test_bad_model_arguments_are_one_line_errors(name, args, info, match):
    with pytest.raises(UsageError, match=match) as err:
        build_model(name, args, info)
    assert "\n" not in str(err.value)
