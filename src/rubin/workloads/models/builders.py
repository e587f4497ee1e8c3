"""Model builders: ``builder(info, **args) -> nn.Module``.

Arguments the data decides (image size, channels, classes, vocab, sequence length) default
from ``info``; a value that cannot work with the data is a one-line error naming the argument.
"""

from __future__ import annotations

from typing import Optional

from rubin.errors import bad_value
from rubin.workloads.arguments import fraction, positive_int
from rubin.workloads.info import DataInfo

F = "model.args"


def _needs(info: DataInfo, task: str, model: str, instead: str) -> None:
    if info.task != task:
        raise bad_value("model.name", model, f"it needs {task} data and this dataset is a '{info.task}' task",
                        f"use model.name={instead} or a {task} dataset")


def _classes(info: DataInfo, num_classes) -> int:
    if num_classes is None:
        return info.num_classes
    positive_int(f"{F}.num_classes", num_classes)
    if info.num_classes and num_classes < info.num_classes:
        raise bad_value(f"{F}.num_classes", num_classes, f"at least the data's {info.num_classes} classes",
                        "drop the override (it defaults from the data)")
    return num_classes


def _image_shape(info: DataInfo, model: str) -> tuple[int, int, int]:
    if len(info.input_shape) != 3:
        raise bad_value("model.name", model, f"it needs (C, H, W) images and samples are {info.input_shape}",
                        "use model.name=mlp for vectors, or an image dataset")
    return info.input_shape


def build_vit(info: DataInfo, *, patch_size: int = 2, dim: int = 64, depth: int = 4, heads: int = 4,
              mlp_ratio: float = 2.0, dropout: float = 0.0, num_classes: Optional[int] = None):
    from rubin.workloads.models.vit import ViT

    _needs(info, "classification", "vit", "gpt")
    c, h, w = _image_shape(info, "vit")
    for name, v in (("patch_size", patch_size), ("dim", dim), ("depth", depth), ("heads", heads)):
        positive_int(f"{F}.{name}", v)
    if h % patch_size or w % patch_size:
        raise bad_value(f"{F}.patch_size", patch_size, f"it must divide the image size {h}x{w}",
                        "pick a divisor of the image side")
    if dim % heads:
        raise bad_value(f"{F}.heads", heads, f"it must divide dim={dim}", "pick heads so that dim/heads is whole")
    fraction(f"{F}.dropout", dropout)
    return ViT((h, w), c, _classes(info, num_classes), patch_size, dim, depth, heads,
               float(mlp_ratio), float(dropout))


def build_resnet(info: DataInfo, *, layout: int = 18, width: int = 64, small_input: Optional[bool] = None,
                 num_classes: Optional[int] = None):
    from rubin.workloads.models.resnet import LAYOUTS, ResNet

    _needs(info, "classification", "resnet", "gpt")
    c, h, w = _image_shape(info, "resnet")
    if layout not in LAYOUTS:
        raise bad_value(f"{F}.layout", layout, "18 (BasicBlock) or 50 (Bottleneck)", f"--set {F}.layout=18")
    positive_int(f"{F}.width", width)
    if small_input is not None and not isinstance(small_input, bool):
        raise bad_value(f"{F}.small_input", small_input, "true, false or null (null: true below 96 px)",
                        f"--set {F}.small_input=true")
    if small_input is None:
        # The ImageNet stem divides the image by 4 before stage 1; below 96 px that leaves too little.
        small_input = min(h, w) < 96
    return ResNet((h, w), c, _classes(info, num_classes), layout, width, bool(small_input))


def build_gpt(info: DataInfo, *, n_layer: int = 12, n_head: int = 12, n_embd: int = 768,
              vocab_size: Optional[int] = None, block_size: Optional[int] = None, dropout: float = 0.0,
              bias: bool = True):
    from rubin.workloads.models.gpt import GPT, GPTConfig

    _needs(info, "lm", "gpt", "vit, resnet or mlp")
    for name, v in (("n_layer", n_layer), ("n_head", n_head), ("n_embd", n_embd)):
        positive_int(f"{F}.{name}", v)
    if n_embd % n_head:
        raise bad_value(f"{F}.n_head", n_head, f"it must divide n_embd={n_embd}", "pick n_head dividing n_embd")
    vocab = vocab_size or info.vocab_size or GPTConfig.vocab_size
    if info.vocab_size and vocab < info.vocab_size:
        raise bad_value(f"{F}.vocab_size", vocab, f"at least the data's vocab size {info.vocab_size}",
                        f"drop the override or set it >= {info.vocab_size}")
    block = block_size or info.seq_len or GPTConfig.block_size
    if info.seq_len and block < info.seq_len:
        raise bad_value(f"{F}.block_size", block, f"at least the data's seq_len {info.seq_len}",
                        f"drop the override or set it >= {info.seq_len}")
    fraction(f"{F}.dropout", dropout)
    cfg = GPTConfig(n_layer, n_head, n_embd, int(vocab), int(block), float(dropout), bool(bias))
    return GPT(cfg, seq_len=info.seq_len)


def build_llama(info: DataInfo, *, size: str = "tiny", n_layer: Optional[int] = None, n_head: Optional[int] = None,
                n_kv_head: Optional[int] = None, dim: Optional[int] = None, ffn: Optional[int] = None,
                vocab_size: Optional[int] = None, block_size: Optional[int] = None, rope_theta: Optional[float] = None,
                tie_embeddings: Optional[bool] = None):
    from dataclasses import replace

    from rubin.workloads.models.llama import SIZES, Llama

    _needs(info, "lm", "llama", "vit, resnet or mlp")
    if size not in SIZES:
        raise bad_value(f"{F}.size", size, f"one of {', '.join(SIZES)}", f"--set {F}.size=tiny")
    base = SIZES[size]
    given = {"n_layer": n_layer, "n_head": n_head, "n_kv_head": n_kv_head, "dim": dim, "ffn": ffn}
    for name, v in given.items():
        if v is not None:
            positive_int(f"{F}.{name}", v)
    cfg = replace(base, **{k: int(v) for k, v in given.items() if v is not None})
    if cfg.dim % cfg.n_head or (cfg.dim // cfg.n_head) % 2:
        raise bad_value(f"{F}.n_head", cfg.n_head, f"it must divide dim={cfg.dim} into an even head size",
                        "pick n_head so that dim/n_head is an even whole number")
    if cfg.n_head % cfg.n_kv_head:
        raise bad_value(f"{F}.n_kv_head", cfg.n_kv_head, f"a divisor of n_head={cfg.n_head}",
                        "each kv head is shared by n_head/n_kv_head query heads")
    vocab = vocab_size or info.vocab_size or cfg.vocab_size
    if info.vocab_size and vocab < info.vocab_size:
        raise bad_value(f"{F}.vocab_size", vocab, f"at least the data's vocab size {info.vocab_size}",
                        f"drop the override or set it >= {info.vocab_size}")
    block = block_size or max(cfg.block_size, info.seq_len or 0)
    if info.seq_len and block < info.seq_len:
        raise bad_value(f"{F}.block_size", block, f"at least the data's seq_len {info.seq_len}",
                        f"drop the override or set it >= {info.seq_len}")
    if rope_theta is not None and not float(rope_theta) > 0:
        raise bad_value(f"{F}.rope_theta", rope_theta, "a positive number", f"--set {F}.rope_theta=500000")
    if tie_embeddings is not None and not isinstance(tie_embeddings, bool):
        raise bad_value(f"{F}.tie_embeddings", tie_embeddings, "true or false", f"--set {F}.tie_embeddings=true")
    cfg = replace(cfg, vocab_size=int(vocab), block_size=int(block),
                  rope_theta=float(rope_theta if rope_theta is not None else cfg.rope_theta),
                  tie_embeddings=cfg.tie_embeddings if tie_embeddings is None else tie_embeddings)
    return Llama(cfg, seq_len=info.seq_len)


def build_mlp(info: DataInfo, *, hidden: int = 256, depth: int = 2, dropout: float = 0.0,
              num_classes: Optional[int] = None):
    from rubin.workloads.models.mlp import MLP

    _needs(info, "classification", "mlp", "gpt")
    positive_int(f"{F}.hidden", hidden)
    positive_int(f"{F}.depth", depth, allow_zero=True)
    fraction(f"{F}.dropout", dropout)
    return MLP(info.input_shape, _classes(info, num_classes), hidden, depth, float(dropout))
