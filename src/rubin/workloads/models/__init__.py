"""Reference models: ViT, ResNet-18/50, GPT, MLP. Each reports its training FLOPs per sample."""

from rubin.workloads.models.gpt import GPT, GPTConfig
from rubin.workloads.models.mlp import MLP
from rubin.workloads.models.resnet import ResNet
from rubin.workloads.models.vit import ViT

__all__ = ["GPT", "GPTConfig", "MLP", "ResNet", "ViT"]
