"""The package surface the trainer uses: light import, no CUDA, wrappers, one-line errors."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import rubin.workloads as workloads
from rubin.errors import UsageError
from rubin.workloads import DataInfo, build_data, build_model, flops_per_sample, model_blocks

SRC = Path(workloads.__file__).parent


def test_importing_the_package_does_not_import_torch():
    code = "import sys, rubin.workloads as w; assert 'torch' not in sys.modules, 'torch'; print(sorted(w.MODELS))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['gpt', 'llama', 'mlp', 'resnet', 'vit']"


def test_no_module_touches_cuda():
    offenders = [p.name for p in SRC.rglob("*.py") if "torch.cuda" in p.read_text() or ".cuda(" in p.read_text()]
    assert offenders == []


def test_modules_stay_small():
    sizes = {p.relative_to(SRC).as_posix(): len(p.read_text().splitlines()) for p in SRC.rglob("*.py")}
    assert max(sizes.values()) < 300, sizes


def test_tables_hold_every_documented_name():
    assert set(workloads.MODELS) == {"vit", "resnet", "gpt", "llama", "mlp"}
    assert set(workloads.DATASETS) == {"digits", "synthetic_images", "synthetic_tokens", "synthetic",
                                       "image_folder", "cifar10", "tokens"}


def test_wrapped_models_are_seen_through():
    vit = build_model("vit", {}, DataInfo.classification((1, 8, 8), 10))

    class Wrapper(nn.Module):  # the shape of DDP and of torch.compile's OptimizedModule
        def __init__(self, attr, inner):
            super().__init__()
            setattr(self, attr, inner)

    wrapped = Wrapper("_orig_mod", Wrapper("module", vit))
    assert flops_per_sample(wrapped) == vit.flops_per_sample()
    assert model_blocks(wrapped) == list(vit.blocks)


def test_a_user_models_own_method_wins_over_a_submodule_called_module():
    class UserModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.module = build_model("mlp", {}, DataInfo.classification((4,), 2))

        def flops_per_sample(self):
            return 42.0

    assert flops_per_sample(UserModel()) == 42.0


def test_every_builder_error_is_a_usage_error_with_exit_code_2():
    with pytest.raises(UsageError) as err:
        build_data("tokens", None, {}, seed=0)
    assert err.value.exit_code == 2


@pytest.fixture
def one_thread():
    # Tiny matmuls run faster on one thread, and a shared machine's cores are oversubscribed.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_digits_vit_learns_quickly(one_thread):
    # A reduced demo: the ViT on digits, four epochs of AdamW, far above chance (10%).
    torch.manual_seed(0)
    train, held, info = build_data("digits", None, {}, seed=0)
    model = build_model("vit", {"patch_size": 4, "dropout": 0.1}, info)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loader = torch.utils.data.DataLoader(train, batch_size=64, shuffle=True,
                                         generator=torch.Generator().manual_seed(0))
    for _ in range(4):
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    xe, ye = held.inputs, held.targets
    with torch.no_grad():
        acc = (model(xe).argmax(1) == ye).float().mean().item()
    assert acc > 0.8
