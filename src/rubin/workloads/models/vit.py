"""Vision Transformer: conv patch embedding, cls token, learned positions, pre-norm SDPA blocks."""

from __future__ import annotations

import torch
from torch import nn

from rubin.workloads.models.layers import Block, block_forward_flops


class ViT(nn.Module):
    def __init__(self, image_size: tuple[int, int], in_channels: int, num_classes: int, patch_size: int = 2,
                 dim: int = 64, depth: int = 4, heads: int = 4, mlp_ratio: float = 2.0, dropout: float = 0.0):
        super().__init__()
        h, w = image_size
        self.num_patches = (h // patch_size) * (w // patch_size)
        self.dim, self.depth, self.num_classes = dim, depth, num_classes
        self.in_channels, self.patch_size = in_channels, patch_size
        self.mlp_hidden = int(dim * mlp_ratio)
        self.patch_embed = nn.Conv2d(in_channels, dim, kernel_size=patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_emb = nn.Parameter(torch.zeros(1, self.num_patches + 1, dim))
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(dim, heads, self.mlp_hidden, dropout) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
        nn.init.trunc_normal_(self.pos_emb, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.apply(_init)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # (B, N, dim)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_emb
        x = self.drop(x)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x[:, 0]))

    def model_blocks(self) -> list[nn.Module]:
        return list(self.blocks)

    def flops_per_sample(self) -> float:
        """Training FLOPs per image: 3 x forward (backward costs twice the forward)."""
        tokens = self.num_patches + 1
        embed = 2 * self.num_patches * self.in_channels * self.patch_size ** 2 * self.dim
        blocks = self.depth * block_forward_flops(tokens, self.dim, self.mlp_hidden)
        head = 2 * self.dim * self.num_classes  # only the cls token goes through the head
        return 3.0 * (embed + blocks + head)


def _init(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        nn.init.trunc_normal_(m.weight, std=0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
