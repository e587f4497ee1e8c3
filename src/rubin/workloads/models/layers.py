"""Transformer pieces shared by the ViT and the GPT: pre-norm block, SDPA attention, MLP."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float = 0.0, bias: bool = True, causal: bool = False):
        super().__init__()
        self.heads, self.causal, self.dropout = heads, causal, dropout
        self.qkv = nn.Linear(dim, 3 * dim, bias=bias)
        self.proj = nn.Linear(dim, dim, bias=bias)
        self.proj_drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        # SDPA picks the flash / memory-efficient kernel on GPUs; is_causal avoids building a mask.
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                           is_causal=self.causal)
        return self.proj_drop(self.proj(y.transpose(1, 2).reshape(b, t, c)))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden, bias=bias)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim, bias=bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.act(self.fc1(x))))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, dim: int, heads: int, mlp_hidden: int, dropout: float = 0.0, bias: bool = True,
                 causal: bool = False):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim, bias=bias)
        self.attn = SelfAttention(dim, heads, dropout, bias, causal)
        self.ln2 = nn.LayerNorm(dim, bias=bias)
        self.mlp = FeedForward(dim, mlp_hidden, dropout, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def block_forward_flops(tokens: int, dim: int, mlp_hidden: int) -> int:
    """Forward FLOPs of one Block on one sample, matmuls only, 2 FLOPs per multiply-add.

    qkv (3 d^2) + proj (d^2) + mlp (2 d h) weights, each used once per token, plus the two
    attention matmuls QK^T and AV (T*T*d MACs each, counted in full even when causal, as PaLM
    and FlopCounterMode do). Norms, softmax, GELU and bias adds are not counted.
    """
    weights = 4 * dim * dim + 2 * dim * mlp_hidden
    return 2 * tokens * weights + 2 * 2 * tokens * tokens * dim
