"""``rubin plan memory --measure``: a plan for a model that has no formula.

The user's model (a reference workload, or ``module:factory`` as ``model.import`` takes it) runs
real training steps at a few small micro-batches and sequence lengths, on the CPU or on the GPU
when there is one (``plan/measure.py``). Autograd's saved bytes are fitted with per-token and
per-sample linear terms; the fit's residual says how linear the model really is. The planner then
extrapolates to the target micro-batch, sequence length, strategy and GPU with the analytic model
states and step phases (``memory.py``): only the activations come from the measurement.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rubin.errors import UsageError, bad_choice, bad_value
from rubin.plan.shapes import ModelShape

# regime -> autocast dtype of the measured step (half precision is measured under autocast: an upper bound)
_MEASURED_AS = {"fp32": "fp32", "amp": "bf16", "half": "bf16"}


@dataclass
class Source:
    """What to build and how to feed it."""

    workload: str | None = None  # a reference model name (rubin.workloads.MODELS)
    factory: str | None = None  # "module:function" or "path/file.py:function"
    model_args: dict = field(default_factory=dict)
    task: str = "lm"  # lm (token ids in, logits per token) or classification (images in)
    vocab: int | None = None
    seq_len: int | None = None  # the target's tokens per sample
    image_shape: tuple[int, int, int] = (3, 32, 32)
    classes: int = 10


def _info(src: Source, seq_len: int):
    from rubin.workloads import DataInfo

    if src.task == "lm":
        return DataInfo.lm(seq_len, src.vocab)
    return DataInfo.classification(src.image_shape, src.classes)


def build(src: Source, seq_len: int):
    from torch import nn

    from rubin import workloads

    if src.factory:
        model = workloads.import_object(src.factory, "import")(**src.model_args)
        if not isinstance(model, nn.Module):
            raise UsageError(f"import={src.factory!r} returned {type(model).__name__}: it must return a torch.nn.Module")
        return model
    args = dict(src.model_args)
    if src.workload in ("gpt", "llama"):
        args.setdefault("block_size", max(seq_len, src.seq_len or seq_len))
    return workloads.build_model(src.workload, args, _info(src, seq_len))


class _Call:
    """Calls the model the way ``rubin train`` does: with ``targets=`` when forward takes them (nanoGPT)."""

    def __init__(self, model, y):
        from rubin.workloads.contract.outputs import takes_targets

        self.model, self.y = model, y
        self.kw = "targets" if takes_targets(model) else None

    def __call__(self, x):
        return self.model(x, **{self.kw: self.y}) if self.kw else self.model(x)


def _batch(src: Source, b: int, s: int, device):
    import torch

    g = torch.Generator().manual_seed(0)
    if src.task == "lm":
        x = torch.randint(0, src.vocab, (b, s), generator=g)
        y = torch.randint(0, src.vocab, (b, s), generator=g)
    else:
        x = torch.randn(b, *src.image_shape, generator=g)
        y = torch.randint(0, src.classes, (b,), generator=g)
    return x.to(device), y.to(device)


def _one(src: Source, b: int, s: int, regime: str, checkpointing: bool, device, *, ops: bool = False, step: bool = False):
    """Saved bytes of one forward at (b, s); ``step``: a full measured training step instead."""
    import torch

    from rubin.plan.measure import forward_saved, measure_step
    from rubin.workloads.contract.blocks import model_blocks

    torch.manual_seed(0)
    model = build(src, s).to(device)
    x, y = _batch(src, b, s, device)
    blocks = model_blocks(model)  # the blocks rubin train checkpoints and shards
    if checkpointing and not blocks:
        raise bad_value("activation-checkpointing", "full", "a model with blocks (model_blocks(), or a blocks/layers/h "
                        "ModuleList)", "plan without checkpointing, or give the model a model_blocks() method")
    precision = _MEASURED_AS[regime]
    if step:
        return measure_step(model, x, y, task=src.task, precision=precision, device=device,
                            wrap=lambda m: _Call(m, y)), model, blocks
    saved, names = forward_saved(model, x, y, task=src.task, precision=precision, checkpointing=checkpointing,
                                 blocks=blocks, call=_Call(model, y), ops=ops)
    return (saved, names), model, blocks


def _fit(points: list[tuple[float, float, float]]):
    """Least squares of saved = k_tok * b*s + k_sample * b + k_score * b*s^2 (no intercept: no batch, no
    activations). The s^2 term is what an attention that materialises its scores adds (eager attention,
    SDPA's math kernel); with flash attention it fits to ~0."""
    import numpy as np

    a = np.array([[b * s, b, b * s * s] for b, s, _ in points], dtype=float)
    v = np.array([p[2] for p in points], dtype=float)
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    coef, *_ = np.linalg.lstsq(a / scale, v, rcond=None)
    coef = coef / scale
    pred = a @ coef
    residual = float(np.max(np.abs(pred - v) / np.maximum(v, 1.0)))
    return float(coef[0]), float(coef[1]), residual, float(coef[2])


def measure_shape(src: Source, *, precision: str, device_want: str = "auto", seq_lens=(32, 48, 64),
                  micro_batches=(2, 4)) -> ModelShape:
    """Measure, fit and return a planner shape whose activations come from the fit."""
    from rubin.plan.tensor_bytes import regime_of
    from rubin.platform import device as dev

    if src.task not in ("lm", "classification"):
        raise bad_choice("task", src.task, ("lm", "classification"))
    if src.task == "lm" and not src.vocab:
        raise bad_value("vocab", src.vocab, "the vocabulary size, to make token ids", "pass --vocab 50304")
    regime = regime_of(precision)
    device = dev.pick_device(0, device_want)
    lens = seq_lens if src.task == "lm" else (1,)
    if src.task == "lm" and src.seq_len:
        lens = tuple(min(s, src.seq_len) for s in lens)
    from rubin.plan.measure import cuda_correction, cuda_differences, kernel_of

    fits, names, corrected = {}, [], 0.0
    model = blocks = None
    grid = [(b, s) for s in sorted(set(lens)) for b in micro_batches]
    # CPU autocast: correct for the ops CUDA's autocast runs in fp32 (they save 4 B per element, not 2)
    correct = device.type == "cpu" and regime != "fp32"
    for mode in ("none", "full"):
        points = []
        for b, s in grid:
            try:
                (saved, ops), model, blocks = _one(src, b, s, regime, mode == "full", device,
                                                   ops=correct or not names)
            except UsageError:
                if mode == "full":  # no blocks: the checkpointed rows fall back to the plain fit
                    break
                raise
            names = names or ops
            extra = cuda_correction(ops) if correct else 0.0
            corrected = max(corrected, extra / saved if saved else 0.0)
            points.append((b, s, saved + extra))
        if points:
            fits[mode] = _fit(points)
    kernel = kernel_of(names)
    diffs = cuda_differences(names, _MEASURED_AS[regime]) if device.type == "cpu" else []
    b, s = grid[-1]
    step, _, _ = _one(src, b, s, regime, False, device, step=True)  # one full step: the phase model's check
    check = (b, s, step)
    params = float(sum(dict((p.data_ptr(), p.numel()) for p in model.parameters()).values()))
    block_params = [float(sum(p.numel() for p in blk.parameters())) for blk in blocks]
    out = _output_size(src, model)
    tied = _tied(model)
    notes = [f"measured on {device.type.upper() if device.type == 'cuda' else 'CPU'} with {kernel}"
             + ("" if kernel == "none" else " (the kernel CUDA's SDPA also picks: same saved tensors)"
                if "flash" in kernel or "efficient" in kernel else "")
             + f"; fit residual {fits['none'][2]:.1%}" + (f", checkpointed {fits['full'][2]:.1%}" if "full" in fits else "")]
    quad = fits["none"][3] * max(lens) ** 2
    if quad > 0.01 * (fits["none"][0] * max(lens) + fits["none"][1] + quad):
        notes.append(f"activations grow with seq_len^2 (attention scores are kept: {kernel if kernel != 'none' else 'eager attention'}); "
                     "an SDPA/flash attention would not keep them")
    if "math" in kernel:
        notes.append("the CPU ran SDPA's math kernel, which saves the s x s scores; CUDA's flash kernel does not: "
                     "the plan over-counts attention")
    if diffs:
        notes.append("; ".join(diffs) + f": corrected, the tensors those ops save counted at fp32 size "
                     f"(+{corrected:.1%} of the CPU's saved bytes)")
    if regime == "half":
        notes.append(f"{precision}: activations measured under bf16 autocast (fp32 residual stream), an upper bound")
    return ModelShape(
        name=src.factory or src.workload, params=params, kind="measured", layers=len(blocks) or None,
        vocab=out, seq_len=(src.seq_len or max(lens)) if src.task == "lm" else None, lm_head=src.task == "lm",
        largest_layer_params=max(block_params + [_largest_leaf(model)]), head_params=float(_head_params(model, out)),
        tied_embeddings=tied, block_params=max(block_params, default=0.0), measured_fit=fits,
        measured_check={"micro_batch": check[0], "seq_len": check[1], "saved_bytes": check[2].saved_bytes,
                        "peak_bytes": check[2].peak_bytes, "device": device.type},
        notes=tuple(notes))


def _output_size(src: Source, model) -> int:
    return int(src.vocab if src.task == "lm" else src.classes)


def _tied(model) -> bool:
    seen = set()
    for _, p in model.named_parameters(remove_duplicate=False):
        if p.data_ptr() in seen:
            return True
        seen.add(p.data_ptr())
    return False


def _head_params(model, out: int) -> int:
    """The output layer: the last Linear whose width is the output size."""
    from torch import nn

    heads = [m for m in model.modules() if isinstance(m, nn.Linear) and m.out_features == out]
    return heads[-1].weight.numel() if heads else 0


def _largest_leaf(model) -> float:
    return float(max((p.numel() for p in model.parameters()), default=0))
