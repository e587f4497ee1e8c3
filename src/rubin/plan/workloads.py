"""The reference workloads (``rubin.workloads``) as planner shapes.

The architecture numbers come from the workload code itself (its config dataclass and
constructor defaults), so the planner and ``rubin train`` cannot drift apart. That code is torch
code, so only ``--workload`` imports torch; flags and ``config.json`` inputs never do.
The vision defaults follow ``rubin train``'s default data (digits: 8x8, 1 channel, 10 classes).
"""

from __future__ import annotations

import inspect

from rubin.errors import UsageError, did_you_mean
from rubin.plan import model as shapes

WORKLOADS = ("gpt", "vit", "resnet18", "resnet50", "mlp")
ALIASES = {"resnet": "resnet18"}


def _defaults(cls) -> dict:
    return {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items()
            if p.default is not inspect.Parameter.empty}


def _saved_bytes_per_sample(module, x) -> float:
    """Bytes autograd keeps for backward per sample, at 16 bit (floats halved from fp32).

    Counted once per storage, the way the allocator sees them, on a real CPU forward of batch 2
    (batch norm refuses a batch of 1), halved.
    """
    import torch

    seen: dict[int, float] = {}

    def pack(t):
        if isinstance(t, torch.Tensor) and t.device.type == "cpu":
            key = t.untyped_storage().data_ptr()
            size = t.untyped_storage().nbytes()
            seen[key] = size / 2 if t.is_floating_point() else size
        return t

    module.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(x).sum().backward()
    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    return float(sum(v for k, v in seen.items() if k not in params)) / x.shape[0]


def workload(name: str, *, seq_len: int | None = None, image_size: int = 8, channels: int = 1, classes: int = 10):
    key = ALIASES.get(name, name)
    if key not in WORKLOADS:
        raise UsageError(f"workload={name!r} is not a reference workload{did_you_mean(name, WORKLOADS)}: "
                         f"allowed are {', '.join(WORKLOADS)}; or pass --params or --config")
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
    import torch

    if key == "vit":
        from rubin.workloads.models.vit import ViT

        d = _defaults(ViT)
        m = ViT((image_size, image_size), channels, classes)
        tokens = m.num_patches + 1
        shape = shapes.transformer(name="vit", layers=d["depth"], hidden=d["dim"], heads=d["heads"],
                                   ffn=int(d["dim"] * d["mlp_ratio"]), vocab=classes, seq_len=tokens,
                                   dropout=d["dropout"] > 0, params=sum(p.numel() for p in m.parameters()))
        return _with(shape, lm_head=False, flops_per_sample=m.flops_per_sample(),
                     input_bytes_per_sample=2.0 * channels * image_size * image_size, tokens_per_sample=0)
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
                             act_bytes_per_sample_16bit=_saved_bytes_per_sample(m, x),
                             flops_per_sample=m.flops_per_sample())


def _with(shape, notes=(), **kw):
    from dataclasses import replace

    return replace(shape, notes=tuple(shape.notes) + tuple(notes), **kw)
