"""``precision=fp8``: torchao's float8 training on the Linear layers big enough to gain from it.

Float8 matmuls run on compute capability 8.9 or newer (Ada, Hopper, Blackwell). Each converted
layer casts its input, weight and gradient to float8 with dynamic per-tensor scales, which costs
a fixed amount of memory traffic per layer, so small layers stay in bf16. Which ones is torchao's
own rule for this recipe (``_auto_filter_for_tensorwise``, from its H100 tables): a layer gains
when out_features > 1024 or in_features > 4096. (rubin's first rule, both sides at least 1024,
converted no layer of GPT-124M, whose 768-wide layers torchao does convert where they widen.)
The output head stays in bf16 too, as torchtitan leaves it: it feeds the softmax directly.
Weights stay in their own dtype, so state dicts and checkpoints are those of a bf16 run and
resume exactly the same way.

``torch._scaled_mm`` also needs the inner dimension of every matmul to be a multiple of 16. For
the weight gradient (grad_out^T @ input) that is the micro-batch's row count, B*T tokens: when it
may not be one, each such matmul is padded (torchao's ``pad_inner_dim``), with one warning.
"""

from __future__ import annotations

from torch import nn

from rubin.errors import UsageError
from rubin.platform import device as dev

# torchao's tensorwise rule: a layer with in_features <= 4096 and out_features <= 1024 loses time in float8
SMALL_IN, SMALL_OUT = 4096, 1024
THRESHOLD = f"out_features > {SMALL_OUT} or in_features > {SMALL_IN}, both multiples of 16"
SKIP_NAMES = ("lm_head", "output", "head")
ALIGN = 16


def refuse_unless_supported(device) -> None:
    """One-line refusal (exit 2) on a CPU, a GPU below capability 8.9, or without torchao."""
    if getattr(device, "type", None) != "cuda":
        raise UsageError("precision=fp8 needs an NVIDIA GPU with float8 tensor cores (compute capability 8.9+: "
                         f"Ada, Hopper, Blackwell) and this run is on {getattr(device, 'type', device)}; "
                         "use precision=bf16 here")
    if not dev.fp8_matmul_supported(device):
        cap = dev.capability(device)
        where = f"{dev.device_name(device)}, capability {cap[0]}.{cap[1]}" if cap else dev.device_name(device)
        raise UsageError(f"precision=fp8 needs compute capability 8.9 or newer (Ada, Hopper, Blackwell) and this GPU "
                         f"is {where}; use precision=bf16 on it")
    try:
        import torchao.float8  # noqa: F401
    except ImportError:
        raise UsageError("precision=fp8 needs torchao, which is not installed; pip install 'rubin[fp8]' "
                         "(or torchao), or use precision=bf16") from None


def worth_converting(module: nn.Module, fqn: str) -> bool:
    """A Linear, not the head, whose dims are multiples of 16 (float8 matmul alignment) and not both small."""
    if not isinstance(module, nn.Linear):
        return False
    if fqn.rsplit(".", 1)[-1] in SKIP_NAMES:
        return False
    i, o = module.in_features, module.out_features
    return i % ALIGN == 0 and o % ALIGN == 0 and not (i <= SMALL_IN and o <= SMALL_OUT)


def plan(model: nn.Module) -> tuple[list[str], list[str]]:
    """(names converted, names of Linears kept in bf16), without converting anything."""
    take, keep = [], []
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            (take if worth_converting(m, name) else keep).append(name)
    return take, keep


def rows_aligned(micro_batch: int, tokens_per_sample: int | None) -> bool:
    """Whether every converted layer's weight-gradient matmul has a row count that is a multiple of 16.

    Its inner dimension is the rows of the layer's input: B*T for a sequence (TOKENS_PER_SAMPLE=T), and
    B times a count rubin does not see for other inputs (image patches): B % 16 is then what is known.
    """
    rows = micro_batch * (tokens_per_sample or 1)
    return rows % ALIGN == 0 or micro_batch % ALIGN == 0


def convert(model: nn.Module, device, *, micro_batch: int = ALIGN, tokens_per_sample: int | None = None,
            warn=lambda message: None, emulate: bool = False) -> list[str]:
    """Swap the big Linears for torchao Float8Linear in place; returns their names. Refuses first where fp8
    cannot run. WARN gets one line for a conversion of no layer, and one for padded weight gradients.
    EMULATE is torchao's float8 emulation (any device, no _scaled_mm): the tests' way through on a CPU."""
    if not emulate:
        refuse_unless_supported(device)
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    take, _ = plan(model)
    if not take:
        warn(f"precision=fp8 converts no Linear of this model: float8 gains only where {THRESHOLD} (torchao's "
             "rule for its recipe; the output head stays bf16), so this run trains in bf16; use precision=bf16")
        return take
    pad = not rows_aligned(micro_batch, tokens_per_sample)
    if pad:
        what = f"{micro_batch} x {tokens_per_sample} tokens" if tokens_per_sample else f"{micro_batch} samples"
        warn(f"precision=fp8: the micro-batch ({what}) may not give a multiple of {ALIGN} rows, which float8's "
             f"weight-gradient matmul needs; padding it (pad_inner_dim, one copy per layer and step); a micro-batch "
             f"of a multiple of {ALIGN} tokens avoids that")
    chosen = set(take)
    convert_to_float8_training(model, config=Float8LinearConfig(pad_inner_dim=pad, emulate=emulate),
                               module_filter_fn=lambda m, fqn: fqn in chosen)
    return take
