"""Llama-class decoder: RMSNorm, SwiGLU, rotary positions, grouped-query attention, no biases.

Sizes follow the published shapes: ``1b`` is Llama-3.2-1B, ``8b`` is Llama-3.1-8B; ``125m`` is a
GPT-2-small-sized Llama for one GPU, ``tiny`` a CPU test size. The vocabulary comes from the data
when the data says it (the builder decides), so ``1b`` on 50304-token data is a 1B body with that head.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class LlamaConfig:
    n_layer: int = 2
    n_head: int = 4
    n_kv_head: int = 2
    dim: int = 64
    ffn: int = 176
    vocab_size: int = 256
    block_size: int = 256
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = True


SIZES = {
    "tiny": LlamaConfig(),
    "125m": LlamaConfig(n_layer=12, n_head=12, n_kv_head=4, dim=768, ffn=2048, vocab_size=32000, block_size=2048),
    "1b": LlamaConfig(n_layer=16, n_head=32, n_kv_head=8, dim=2048, ffn=8192, vocab_size=128256, block_size=8192),
    "8b": LlamaConfig(n_layer=32, n_head=32, n_kv_head=8, dim=4096, ffn=14336, vocab_size=128256, block_size=8192,
                      tie_embeddings=False),
}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # torch's fused kernel; it computes in fp32 under autocast
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def rope_tables(head_dim: int, length: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of shape (length, head_dim / 2), in fp32."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(length, dtype=torch.float32), inv)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (B, H, T, D) pairs (x[..., :D/2], x[..., D/2:]), the Hugging Face Llama layout."""
    a, b = x.float().chunk(2, dim=-1)
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.n_head, c.n_kv_head, c.dim // c.n_head
        self.wq = nn.Linear(c.dim, c.n_head * self.head_dim, bias=False)
        self.wk = nn.Linear(c.dim, c.n_kv_head * self.head_dim, bias=False)
        self.wv = nn.Linear(c.dim, c.n_kv_head * self.head_dim, bias=False)
        self.wo = nn.Linear(c.n_head * self.head_dim, c.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # enable_gqa lets SDPA share each kv head among heads/kv_heads query heads without copying it
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class LlamaBlock(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.attn_norm = RMSNorm(c.dim, c.norm_eps)
        self.attn = Attention(c)
        self.mlp_norm = RMSNorm(c.dim, c.norm_eps)
        self.mlp = SwiGLU(c.dim, c.ffn)
        # The rotary tables ride on each block so that a block stays callable on its own (regional compile,
        # activation checkpointing); they are buffers, not parameters, and are not saved.
        self.register_buffer("cos", torch.empty(0), persistent=False)
        self.register_buffer("sin", torch.empty(0), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        cos, sin = self.cos[:t], self.sin[:t]
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    def __init__(self, config: LlamaConfig, seq_len: int | None = None):
        super().__init__()
        c = self.config = config
        if c.dim % c.n_head or c.n_head % c.n_kv_head or (c.dim // c.n_head) % 2:
            raise ValueError(f"bad Llama shape: dim {c.dim}, heads {c.n_head}, kv heads {c.n_kv_head}")
        self.seq_len = seq_len or c.block_size
        self.tok_embeddings = nn.Embedding(c.vocab_size, c.dim)
        self.blocks = nn.ModuleList(LlamaBlock(c) for _ in range(c.n_layer))
        self.norm = RMSNorm(c.dim, c.norm_eps)
        self.lm_head = nn.Linear(c.dim, c.vocab_size, bias=False)
        if c.tie_embeddings:
            self.lm_head.weight = self.tok_embeddings.weight
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith(("attn.wo.weight", "mlp.w2.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layer))
        self._set_rope()

    def _set_rope(self) -> None:
        cos, sin = rope_tables(self.config.dim // self.config.n_head, self.config.block_size, self.config.rope_theta)
        for block in self.blocks:
            block.cos, block.sin = cos, sin

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def hidden(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids (B, T) -> the final normed hidden states (B, T, dim), the head's input."""
        if idx.shape[1] > self.config.block_size:
            raise ValueError(f"sequence length {idx.shape[1]} exceeds block_size {self.config.block_size}")
        x = self.tok_embeddings(idx)
        for block in self.blocks:
            x = block(x)
        return self.norm(x)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids (B, T) -> logits (B, T, vocab)."""
        return self.lm_head(self.hidden(idx))

    def model_blocks(self) -> list[nn.Module]:
        return list(self.blocks)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops_per_sample(self) -> float:
        return llama_flops_per_sample(self.config, self.seq_len)


def llama_flops_per_sample(c: LlamaConfig, seq_len: int) -> float:
    """Training FLOPs per sequence: 3 x forward, matmuls only (PaLM appendix B, as the GPT counts them).

    Forward per token: 2 x (q, o: d^2 each; k, v: d x kv_dim each; SwiGLU: 3 d ffn) per layer plus
    2 d V for the head; attention QK^T and AV: 4 T d per layer, counted in full though causal.
    """
    kv_dim = c.n_kv_head * (c.dim // c.n_head)
    weights = c.n_layer * (2 * c.dim * c.dim + 2 * c.dim * kv_dim + 3 * c.dim * c.ffn) + c.dim * c.vocab_size
    forward = 2 * seq_len * weights + 4 * c.n_layer * seq_len * seq_len * c.dim
    return 3.0 * forward
