"""Model states per GPU (weights, gradients, optimizer state) for each data-parallel strategy.

Paper mode follows Rajbhandari et al. 2019 (ZeRO), Fig. 1: with mixed-precision Adam the states
are 2 B weights + 2 B gradients + K=12 B (fp32 master, m, v) per parameter, and stage s shards
the last s of the three across the N data-parallel ranks. Conservative mode reproduces
DeepSpeed's own estimators (``estimate_zero2_model_states_mem_needs`` and
``estimate_zero3_model_states_mem_needs``), in either of the two versions in ``CONSERVATIVE``:
they also count 4 B of fp32 gradients per parameter at the optimizer step, and ZeRO-3 keeps a
16-bit parameter copy in its shard (18 B, not 16 B).
"""

from __future__ import annotations

from dataclasses import dataclass

from rubin.errors import bad_choice
from rubin.plan.tensor_bytes import size

# The names mean what ``rubin train precision=...`` means: fp32; bf16 and fp16 are torch.autocast over
# fp32 weights (plain PyTorch AMP). The others are planner-only, for jobs trained elsewhere:
# *-mixed: 16-bit weights with an fp32 master copy (DeepSpeed, Megatron); pure-bf16: bf16 throughout.
PRECISIONS = ("bf16", "fp16", "fp32", "bf16-mixed", "fp16-mixed", "pure-bf16")
AUTOCAST = ("bf16", "fp16")
ALIASES = {"amp-bf16": "bf16", "amp-fp16": "fp16"}  # the planner's earlier names for autocast
DEFAULT_PRECISION = "bf16"  # what the README's GPU runs train with (rubin train precision=bf16)


def canonical_precision(precision: str) -> str:
    """The one name of a precision (``amp-bf16`` is ``bf16``); a name nobody runs is refused."""
    name = ALIASES.get(precision, precision)
    if name not in PRECISIONS:
        raise bad_choice("precision", precision, PRECISIONS, "bf16 and fp16 are autocast, as in rubin train")
    return name
OPTIMIZERS = ("adamw", "sgd-momentum", "sgd", "adam8bit")


@dataclass(frozen=True)
class BytesPerParam:
    """Bytes per parameter of each model-state component, before sharding."""

    weights: float  # the copy that forward/backward use
    grads: float
    optimizer: float  # K: fp32 master copy (mixed precision only) + optimizer moments
    cast: float = 0.0  # autocast's 16-bit copy of each weight, alive from forward until its layer's backward


def bytes_per_param(precision: str = DEFAULT_PRECISION, optimizer: str = "adamw") -> BytesPerParam:
    precision = canonical_precision(precision)
    if optimizer not in OPTIMIZERS:
        raise bad_choice("optimizer", optimizer, OPTIMIZERS, "pass one of those with --optimizer")
    if precision in AUTOCAST:
        # fp32 weights, gradients and moments; autocast also keeps a 16-bit copy of each weight
        # for backward (tensor_bytes "weight_cast"), counted apart because backward frees it
        moments = {"adamw": 8.0, "sgd-momentum": 4.0, "sgd": 0.0, "adam8bit": 2.0}[optimizer]
        return BytesPerParam(weights=4.0, grads=4.0, optimizer=moments, cast=size("weight_cast", "amp"))
    mixed = precision.endswith("-mixed")
    w = 4.0 if precision == "fp32" else 2.0
    master = 4.0 if mixed else 0.0
    # moments live in fp32 except in pure bf16 training, where they follow the weights
    moment = 2.0 if precision == "pure-bf16" else 4.0
    moments = {
        "adamw": 2 * moment,  # m and v
        "sgd-momentum": moment,  # one momentum buffer
        "sgd": 0.0,
        # bitsandbytes 8-bit Adam: m and v quantized to 1 B each (block scales are < 1% more)
        "adam8bit": 2.0,
    }[optimizer]
    return BytesPerParam(weights=w, grads=w, optimizer=master + moments)


STRATEGY_LABELS = {
    "single": "one GPU",  # no wrapper: the ladder's first rung when there is one GPU
    "ddp": "DDP",
    "zero1": "ZeRO-1",
    "zero2": "ZeRO-2",
    "hybrid": "hybrid shard",  # ZeRO-3 inside a node, replicated across nodes
    "fsdp": "FSDP",  # full shard, = ZeRO-3
    "fsdp+ac": "FSDP+AC",  # + full activation checkpointing
    "fsdp+ac+offload": "FSDP+AC+offload",  # + CPU offload of parameters and optimizer (slow)
}
STRATEGY_DESCRIPTIONS = {
    "single": "one GPU, no data-parallel wrapper: all states, no gradient buckets",
    "ddp": "DistributedDataParallel: every GPU holds all states, and DDP's gradient buckets",
    "zero1": "ZeRO-1 / ZeroRedundancyOptimizer over DDP: optimizer state sharded (DDP's buckets stay)",
    "zero2": "ZeRO-2 / FSDP SHARD_GRAD_OP: optimizer state and gradients sharded",
    "hybrid": "FSDP HYBRID_SHARD: ZeRO-3 inside a node, replicated across nodes",
    "fsdp": "FSDP FULL_SHARD / ZeRO-3: everything sharded, one layer gathered at a time",
    "fsdp+ac": "FSDP FULL_SHARD with full activation checkpointing",
    "fsdp+ac+offload": "FSDP with checkpointing and CPU offload of parameters and optimizer (slow: PCIe-bound)",
}


@dataclass(frozen=True)
class States:
    """Model-state bytes on one GPU, by component."""

    weights: float
    grads: float
    optimizer: float
    gathered: float  # ZeRO-3: the largest layer's unsharded weights and gradients while in use
    cast: float = 0.0  # autocast's 16-bit weight copies (freed layer by layer in backward)
    buckets: float = 0.0  # DDP's gradient buckets: a second copy of the gradients, always resident
    optimizer_params: float = 0.0  # parameters this GPU's optimizer steps (its shard)

    @property
    def total(self) -> float:
        """The ZeRO paper's model states (DDP's buckets are a wrapper's buffer, reported apart)."""
        return self.weights + self.grads + self.optimizer + self.gathered + self.cast

    @property
    def resident(self) -> float:
        """What stays allocated between steps: weights, optimizer state, DDP buckets."""
        return self.weights + self.optimizer + self.gathered + self.buckets

    def as_dict(self) -> dict:
        return {
            "weights_bytes": self.weights,
            "weight_cast_bytes": self.cast,
            "grads_bytes": self.grads,
            "ddp_bucket_bytes": self.buckets,
            "optimizer_bytes": self.optimizer,
            "gathered_layer_bytes": self.gathered,
        }


# --conservative: model states as DeepSpeed's own estimators count them. The two formulas belong to
# different DeepSpeed versions (ZeRO-1 and ZeRO-2 share one estimator there):
CONSERVATIVE = {
    # deepspeed/runtime/zero/stage_1_and_2.py estimate_zero2_model_states_mem_needs, current source
    # (as in 0.19.8): "2 = params_16bit, 18 = 2_grads_16bit + 4_grads_32bit + 4_params_32bit + 8_optimizer_states"
    "deepspeed": "DeepSpeed 0.19.8 estimators: ZeRO-1/2 2P + 18P/N, ZeRO-3 4L + 18P/N",
    # the same function in older releases, and the docs' worked example (docs/code-docs/source/memory.rst:
    # t5-3b on 8 GPUs, 15.93 GiB = 6P): 4P + 16P/N
    "deepspeed-legacy": "older DeepSpeed estimators (the docs' t5-3b example): ZeRO-1/2 4P + 16P/N, ZeRO-3 4L + 18P/N",
}


def check_conservative(mode) -> str | None:
    if mode in (None, False, ""):
        return None
    if mode is True:
        return "deepspeed"
    if mode not in CONSERVATIVE:
        raise bad_choice("conservative", mode, CONSERVATIVE, "e.g. --conservative deepspeed")
    return mode


def model_states(
    strategy: str,
    params: float,
    gpus: int,
    *,
    gpus_per_node: int | None = None,
    largest_layer: float = 0.0,
    bpp: BytesPerParam | None = None,
    conservative: str | bool | None = None,
) -> States:
    """Bytes of model states per GPU for ``strategy`` with P=params over N=gpus ranks.

    ZeRO-1 ``(w+g)P + K P/N``, ZeRO-2 ``wP + (g+K)P/N``, ZeRO-3 ``(w+g+K)P/N + (w+g)L``;
    hybrid shard is ZeRO-3 over the GPUs of one node; offload keeps only the gathered layer.
    DDP (and ZeRO-1, which torch runs over DDP) adds its gradient buckets, a second copy of the gradients.
    """
    mode = check_conservative(conservative)
    b = bpp or bytes_per_param("bf16-mixed")  # the paper's mixed-precision Adam
    n = gpus
    node = gpus_per_node or gpus
    w, g, k, c = b.weights * params, b.grads * params, b.optimizer * params, b.cast * params
    buckets = size("ddp_bucket", "fp32") * g
    # DeepSpeed keeps fp32 gradients (4 B) for the step, sharded like the optimizer state
    fp32_grads = 4.0 * params if mode else 0.0
    gathered = (b.weights + b.grads + b.cast) * largest_layer
    if strategy in ("ddp", "single"):
        return States(w, g + fp32_grads, k, 0.0, c, buckets if strategy == "ddp" else 0.0, params)
    if strategy in ("zero1", "zero2"):
        if mode == "deepspeed-legacy":  # 4P + 16P/N: both 16-bit copies whole
            return States(w, g + fp32_grads / n, k / n, 0.0, c, 0.0, params / n)
        if mode == "deepspeed":  # 2P + 18P/N: the 16-bit gradients sharded too
            return States(w, (g + fp32_grads) / n, k / n, 0.0, c, 0.0, params / n)
        if strategy == "zero1":
            return States(w, g, k / n, 0.0, c, buckets, params / n)
        return States(w, g / n, k / n, 0.0, c, 0.0, params / n)
    if strategy in ("fsdp", "fsdp+ac", "hybrid"):
        shards = node if strategy == "hybrid" else n
        if mode:
            # DeepSpeed's 18P/N: the 16-bit parameter shard + fp32 gradients + fp32 master, m, v
            return States(w / shards, fp32_grads / shards, k / shards, gathered, c / shards, 0.0, params / shards)
        return States(w / shards, g / shards, k / shards, gathered, c / shards, 0.0, params / shards)
    if strategy == "fsdp+ac+offload":
        # parameters, gradients and optimizer state live on the CPU; the GPU holds the layer in use
        return States(0.0, 0.0, 0.0, gathered)
    raise bad_choice("strategy", strategy, STRATEGY_LABELS)


def host_bytes_per_node(params: float, gpus: int, gpus_per_node: int, bpp: BytesPerParam) -> float:
    """CPU memory per node that offloading needs: the node's shards of all states.

    DeepSpeed adds a 1.5x buffer factor to its CPU estimates; we do the same.
    """
    total = (bpp.weights + bpp.grads + bpp.optimizer) * params
    return 1.5 * total * gpus_per_node / gpus
