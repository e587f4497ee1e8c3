"""Reference models: ViT, ResNet-18/50, GPT, Llama, MLP. Each reports its training FLOPs per sample.

The classes load on first use, so importing ``rubin.workloads`` (for its tables of names)
does not import torch.
"""

import importlib

_WHERE = {"GPT": "gpt", "GPTConfig": "gpt", "Llama": "llama", "LlamaConfig": "llama", "MLP": "mlp", "ResNet": "resnet",
          "ViT": "vit"}
__all__ = sorted(_WHERE)


def __getattr__(name):
    if name in _WHERE:
        return getattr(importlib.import_module(f"rubin.workloads.models.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
