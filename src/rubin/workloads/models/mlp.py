"""A plain MLP classifier: flatten, ``depth`` hidden layers of Linear + GELU + dropout, a head."""

from __future__ import annotations

import math

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, input_shape: tuple[int, ...], num_classes: int, hidden: int = 256, depth: int = 2,
                 dropout: float = 0.0):
        super().__init__()
        self.in_features = math.prod(input_shape)
        widths = [self.in_features] + [hidden] * depth
        self.layers = nn.ModuleList(
            nn.Sequential(nn.Linear(a, b), nn.GELU(), nn.Dropout(dropout)) for a, b in zip(widths, widths[1:]))
        self.head = nn.Linear(widths[-1], num_classes)
        self._macs = sum(a * b for a, b in zip(widths, widths[1:])) + widths[-1] * num_classes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)

    def model_blocks(self) -> list[nn.Module]:
        return list(self.layers)

    def flops_per_sample(self) -> float:
        """3 x forward; forward is 2 FLOPs per weight (one multiply-add per weight per sample)."""
        return 3.0 * 2 * self._macs
