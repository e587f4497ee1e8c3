"""GPT decoder (nanoGPT layout): causal SDPA blocks, learned positions, tied embedding and head."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from rubin.workloads.models.layers import Block, block_forward_flops


@dataclass
class GPTConfig:
    """Defaults are GPT-2 small (124M parameters); vocab 50304 is 50257 padded to a multiple of 64."""

    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    vocab_size: int = 50304
    block_size: int = 1024
    dropout: float = 0.0
    bias: bool = True


class GPT(nn.Module):
    def __init__(self, config: GPTConfig, seq_len: int | None = None):
        super().__init__()
        self.config = config
        # The sequence length the data feeds; FLOPs are per sample at this length.
        self.seq_len = seq_len or config.block_size
        d = config.n_embd
        self.wte = nn.Embedding(config.vocab_size, d)
        self.wpe = nn.Embedding(config.block_size, d)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(d, config.n_head, 4 * d, config.dropout, config.bias, causal=True)
                                    for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(d, bias=config.bias)
        self.lm_head = nn.Linear(d, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying (Press & Wolf 2017)
        self.apply(self._init)
        # GPT-2: scale the residual projections by 1/sqrt(2 * n_layer) so depth doesn't grow the stream.
        for name, p in self.named_parameters():
            if name.endswith(("attn.proj.weight", "mlp.fc2.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def hidden(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids (B, T) -> the final normed hidden states (B, T, n_embd), the head's input."""
        t = idx.shape[1]
        if t > self.config.block_size:
            raise ValueError(f"sequence length {t} exceeds block_size {self.config.block_size}")
        pos = torch.arange(t, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids (B, T) -> logits (B, T, vocab)."""
        return self.lm_head(self.hidden(idx))

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameters, counting the tied embedding once; ``non_embedding`` drops the position table."""
        n = sum(p.numel() for p in self.parameters())
        return n - self.wpe.weight.numel() if non_embedding else n

    def model_blocks(self) -> list[nn.Module]:
        return list(self.blocks)

    def flops_per_sample(self) -> float:
        """Training FLOPs per sequence of ``seq_len`` tokens: 3 x forward.

        Forward = 2 FLOPs x (12 L d^2 block weights + d V head weights) per token, plus the
        attention matmuls 4 L d T^2. That is PaLM's 6 N T + 12 L d T^2 (appendix B) with N the
        matmul parameters: the tied embedding counts once, as the head; embedding lookups are free.
        """
        c, t = self.config, self.seq_len
        blocks = c.n_layer * block_forward_flops(t, c.n_embd, 4 * c.n_embd)
        head = 2 * t * c.n_embd * c.vocab_size
        return 3.0 * (blocks + head)
