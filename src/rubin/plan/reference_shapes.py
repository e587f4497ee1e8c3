"""The reference workloads (``rubin.workloads``) as planner shapes.

The architecture numbers come from the workload code itself (its config dataclass and
constructor defaults), so the planner and ``rubin train`` cannot drift apart. That code is torch
code, so only ``--workload`` imports torch; flags and ``config.json`` inputs never do.
The vision defaults follow ``rubin train``'s default data (digits: 8x8, 1 channel, 10 classes).
"""

from __future__ import annotations

import inspect

from rubin.errors import bad_choice
from rubin.plan import shapes

WORKLOADS = ("gpt", "llama", "llama1b", "llama8b", "vit", "resnet18", "resnet50", "mlp")
ALIASES = {"resnet": "resnet18", "llama125m": "llama"}
LLAMA_SIZES = {"llama": "125m", "llama1b": "1b", "llama8b": "8b"}


def _defaults(cls) -> dict:
    return {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items()
            if p.default is not inspect.Parameter.empty}


def _saved_bytes_per_sample(module, x) -> dict:
    """Bytes autograd keeps for backward per sample, in each precision regime, measured.

    Counted once per storage, the way the allocator sees them, on a real CPU forward of batch 2
    (batch norm refuses a batch of 1): fp32 as built, ``amp`` under bf16 autocast, ``half`` with
    the weights in bf16. The loss is rubin's (fp32 log-softmax), so its saved log-probs are included.
    """
    import contextlib
    import copy

    import torch

    from rubin.plan.measure import count_saved
    from rubin.workloads.contract.outputs import loss_fn

    target = torch.zeros(x.shape[0], dtype=torch.long)
    out = {}
    for regime in ("fp32", "amp", "half"):
        m = copy.deepcopy(module).train()
        inp = x
        if regime == "half":
            m, inp = m.to(torch.bfloat16), x.to(torch.bfloat16)
        params = {p.untyped_storage().data_ptr() for p in m.parameters()}
        saved: dict = {}
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if regime == "amp" else contextlib.nullcontext()
        with count_saved(params, saved), ctx:
            loss = loss_fn("classification", m(inp), target)
        loss.backward()
        out[regime] = float(sum(saved.values())) / x.shape[0]
    return out


def workload(name: str, *, seq_len: int | None = None, image_size: int = 8, channels: int = 1, classes: int = 10):
    key = ALIASES.get(name, name)
    if key not in WORKLOADS:
        raise bad_choice("workload", name, WORKLOADS, "or pass --params or --config")
    if key == "gpt":
        from rubin.workloads.models.gpt import GPTConfig

        cfg = GPTConfig()
        block = seq_len or cfg.block_size
        shape = shapes.transformer(name="gpt (GPT-2 small)", layers=cfg.n_layer, hidden=cfg.n_embd,
                                   heads=cfg.n_head, vocab=cfg.vocab_size, seq_len=block,
                                   dropout=cfg.dropout > 0, bias=cfg.bias)
        notes = ()
        if block > cfg.block_size:
            notes = (f"seq_len {block} > the workload's block_size {cfg.block_size}: planned with a {block}-row position table",)
        flops = 6 * (shape.params - block * shape.hidden) * block + 12 * cfg.n_layer * cfg.n_embd * block * block
        return _with(shape, notes=notes, flops_per_sample=flops, tokens_per_sample=block)
    if key in LLAMA_SIZES:
        return _llama(key, seq_len)
    import torch

    if key == "vit":
        from rubin.workloads.models.vit import ViT

        d = _defaults(ViT)
        m = ViT((image_size, image_size), channels, classes)
        tokens = m.num_patches + 1
        shape = shapes.transformer(name="vit", layers=d["depth"], hidden=d["dim"], heads=d["heads"],
                                   ffn=int(d["dim"] * d["mlp_ratio"]), vocab=classes, seq_len=tokens, tied_embeddings=False,
                                   dropout=d["dropout"] > 0, params=sum(p.numel() for p in m.parameters()))
        return _with(shape, lm_head=False, flops_per_sample=m.flops_per_sample(),
                     input_bytes_per_sample=float(channels * image_size * image_size), tokens_per_sample=0,
                     head_params=float(d["dim"] * classes))
    if key.startswith("resnet"):
        from rubin.workloads.models.resnet import ResNet

        m = ResNet((image_size, image_size), channels, classes, layout=int(key[6:]), small_input=image_size <= 64)
        x = torch.randn(2, channels, image_size, image_size)
        blocks = m.model_blocks()
    else:
        from rubin.workloads.models.mlp import MLP

        m = MLP((channels, image_size, image_size), classes)
        x = torch.randn(2, channels, image_size, image_size)
        blocks = m.model_blocks()
    params = float(sum(p.numel() for p in m.parameters()))
    largest = float(max(sum(p.numel() for p in b.parameters()) for b in blocks))
    return shapes.ModelShape(name=key, params=params, kind="cnn" if key.startswith("resnet") else "mlp",
                             vocab=classes, largest_layer_params=largest,
                             act_bytes_per_sample=_saved_bytes_per_sample(m, x),
                             flops_per_sample=m.flops_per_sample())


def _llama(key: str, seq_len: int | None):
    from rubin.workloads.models.llama import SIZES, llama_flops_per_sample

    cfg = SIZES[LLAMA_SIZES[key]]
    seq = seq_len or min(cfg.block_size, 2048)
    shape = shapes.transformer(name=f"{key} (Llama {LLAMA_SIZES[key]})", layers=cfg.n_layer, hidden=cfg.dim,
                               heads=cfg.n_head, kv_heads=cfg.n_kv_head, ffn=cfg.ffn, vocab=cfg.vocab_size, seq_len=seq,
                               gated_mlp=True, dropout=False, tied_embeddings=cfg.tie_embeddings,
                               learned_positions=False, bias=False)
    return _with(shape, flops_per_sample=llama_flops_per_sample(cfg, seq), tokens_per_sample=seq)


def _with(shape, notes=(), **kw):
    from dataclasses import replace

    return replace(shape, notes=tuple(shape.notes) + tuple(notes), **kw)
