"""``precision=fp8``: torchao's float8 training on the Linear layers big enough to gain from it.

Float8 matmuls run on compute capability 8.9 or newer (Ada, Hopper, Blackwell). Each converted
layer casts its input, weight and gradient to float8 with dynamic per-tensor scales, which costs
a fixed amount of memory traffic per layer: below about 1024 on the smaller side the cast costs
more than the faster matmul saves, so those layers stay in bf16 (torchao's own measurements put
the break-even in that range on H100). The output head stays in bf16 too, as torchtitan leaves it:
it feeds the softmax directly. Weights stay in their own dtype, so state dicts and checkpoints
are those of a bf16 run and resume exactly the same way.
"""

from __future__ import annotations

from torch import nn

from rubin.errors import UsageError
from rubin.platform import device as dev

MIN_DIM = 1024  # both in_features and out_features at least this
SKIP_NAMES = ("lm_head", "output", "head")


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


def worth_converting(module: nn.Module, fqn: str, min_dim: int = MIN_DIM) -> bool:
    """A Linear whose both dims are multiples of 16 (float8 matmul alignment) and at least ``min_dim``."""
    if not isinstance(module, nn.Linear):
        return False
    if fqn.rsplit(".", 1)[-1] in SKIP_NAMES:
        return False
    i, o = module.in_features, module.out_features
    return i % 16 == 0 and o % 16 == 0 and min(i, o) >= min_dim


def plan(model: nn.Module, min_dim: int = MIN_DIM) -> tuple[list[str], list[str]]:
    """(names converted, names of Linears kept in bf16), without converting anything."""
    take, keep = [], []
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            (take if worth_converting(m, name, min_dim) else keep).append(name)
    return take, keep


def convert(model: nn.Module, device, min_dim: int = MIN_DIM) -> list[str]:
    """Swap the big Linears for torchao Float8Linear in place; returns their names. Refuses first where fp8 cannot run."""
    refuse_unless_supported(device)
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    take, _ = plan(model, min_dim)
    if take:
        chosen = set(take)
        convert_to_float8_training(model, config=Float8LinearConfig(),
                                   module_filter_fn=lambda m, fqn: fqn in chosen)
    return take
