"""Block discovery: the documented rules, distributed.blocks, and never silent when nothing is found."""

import pytest
from torch import nn

from rubin.errors import UsageError
from rubin.workloads.contract.blocks import find_blocks, missing_warning


class Block(nn.Module):
    def __init__(self, d=4):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)


def _at(path: str, container) -> nn.Module:
    """A model holding CONTAINER at dotted PATH, next to a small embedding (as real models do)."""
    root = nn.Module()
    root.embed = nn.Embedding(3, 4)
    node = root
    parts = path.split(".")
    for part in parts[:-1]:
        child = nn.Module()
        setattr(node, part, child)
        node = child
    setattr(node, parts[-1], container)
    return root


@pytest.mark.parametrize("path", [
    "transformer.h",        # nanoGPT, HF GPT-2
    "model.layers",         # HF Llama / Mistral
    "bert.encoder.layer",   # HF BERT inside its task head
    "blocks",               # timm ViT (an nn.Sequential)
    "stages",               # timm ConvNeXt
    "net.transformer.h",    # an HF model inside the user's wrapper
])
def test_common_layouts_are_found(path):
    blocks = nn.Sequential(*[Block() for _ in range(3)]) if path in ("blocks", "stages") else nn.ModuleList(Block() for _ in range(3))
    model = _at(path, blocks)
    found, how = find_blocks(model)
    assert found == list(blocks) and how == path


def test_torchvision_resnet_stages_are_the_blocks():
    class ResNetLike(nn.Module):  # torchvision's attribute names: conv1, bn1, layer1..layer4, fc
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)
            for i in range(1, 5):
                setattr(self, f"layer{i}", nn.Sequential(nn.Conv2d(4, 4, 3), nn.BatchNorm2d(4)))
            self.fc = nn.Linear(4, 10)

    model = ResNetLike()
    found, how = find_blocks(model)
    assert found == [model.layer1, model.layer2, model.layer3, model.layer4]
    assert how == "layer1,layer2,layer3,layer4"


def test_the_largest_named_container_wins_over_a_small_one():
    model = _at("encoder.layers", nn.ModuleList(Block(8) for _ in range(4)))
    model.head = nn.Module()
    model.head.layers = nn.ModuleList([nn.Linear(2, 2)])
    assert find_blocks(model)[1] == "encoder.layers"


def test_a_models_own_model_blocks_wins():
    class Says(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(Block() for _ in range(3))

        def model_blocks(self):
            return [self.layers[0]]

    model = Says()
    assert find_blocks(model)[0] == [model.layers[0]]


def test_distributed_blocks_by_class_name_path_and_list():
    model = _at("transformer.h", nn.ModuleList(Block() for _ in range(3)))
    h = list(model.transformer.h)
    assert find_blocks(model, "Block")[0] == h
    assert find_blocks(model, "transformer.h")[0] == h
    assert find_blocks(model, "transformer.h.0, transformer.h.2")[0] == [h[0], h[2]]
    assert find_blocks(model, "Linear")[0] == [b.fc for b in h]  # any class: the units are the user's choice


def test_a_bad_distributed_blocks_names_the_candidates():
    model = _at("transformer.h", nn.ModuleList(Block() for _ in range(3)))
    with pytest.raises(UsageError, match=r"distributed.blocks='Blok' is not valid: 'Blok' is neither a module path nor a class "
                                         r"in this model \(did you mean 'Block'\?\); repeated classes here: Block"):
        find_blocks(model, "Blok")
    with pytest.raises(UsageError, match="the blocks overlap"):
        find_blocks(model, "transformer.h,transformer.h.0")


def test_nothing_found_is_a_warning_naming_the_key_only_when_it_matters():
    assert find_blocks(nn.Sequential(nn.Linear(2, 2), nn.ReLU())) == ([], "none found")
    assert missing_warning("ddp", False) is None
    text = missing_warning("fsdp", True)
    assert "FSDP per-block sharding and activation checkpointing have no per-block effect" in text
    assert "set distributed.blocks" in text
    assert "activation checkpointing has no per-block effect" in missing_warning("single", True)
