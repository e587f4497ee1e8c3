"""Linear + cross-entropy without the full logits: the language-model head and its loss in one step.

A plain head makes (tokens x vocab) logits, an fp32 copy for the softmax, and keeps both for the
backward: on GPT-124M at micro-batch 32 that is 19.8 GB of 30.8 GB of activations. Here the tokens
go through in chunks; each chunk's logits live only while that chunk is computed, the forward keeps
one log-sum-exp per token, and the backward recomputes each chunk's logits (one extra head matmul,
about 1/3 more head FLOPs) instead of storing them. Peak extra memory is one chunk's logits.

Liger-Kernel's fused linear cross-entropy (``impl="liger"``, an optional extra) is a Triton kernel that
computes the gradients inside the forward's chunks: three head matmuls instead of four, and fused
passes over each chunk. It runs on CUDA only, so this torch version is the one that also runs, and is
tested, on CPU, and the oracle Liger's is held against.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from rubin.errors import UsageError

# Rows per chunk: 8192 x 50k-vocab fp32 logits are 1.6 GB; small enough to be noise beside the
# activations, big enough that each chunk's matmul still fills a GPU.
DEFAULT_CHUNK = 8192


def _wide(t: torch.Tensor) -> torch.Tensor:
    """The softmax's dtype: fp32 for bf16/fp16/fp32 inputs, fp64 stays fp64."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def _product_wide(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` in the accumulator's dtype (fp32 for bf16/fp16 inputs), so the weight gradient is rounded to the
    input dtype once, at the end, as the plain head's single matmul is; rounding each chunk's product first
    doubled the error under bf16 autocast. On CUDA the tensor cores accumulate in fp32 and return it
    (``out_dtype``); elsewhere the fp32 product of the same bf16 values is that exact result."""
    wide = torch.promote_types(a.dtype, torch.float32)
    if a.dtype == wide:
        return a @ b
    if a.is_cuda:
        try:
            return torch.mm(a, b, out_dtype=wide)
        except (TypeError, RuntimeError):  # a torch without mm's out_dtype, or a dtype it does not take
            pass
    return a.to(wide) @ b.to(wide)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, target, ignore_index: int, chunk: int):
        n = hidden.shape[0]
        wide = torch.promote_types(hidden.dtype, torch.float32)
        lse = torch.empty(n, dtype=wide, device=hidden.device)
        total = torch.zeros((), dtype=wide, device=hidden.device)
        valid = target != ignore_index
        for start in range(0, n, chunk):
            end = min(start + chunk, n)
            logits = _wide(hidden[start:end] @ weight.t())
            lse[start:end] = torch.logsumexp(logits, dim=-1)
            t = target[start:end].clamp(min=0)
            picked = logits.gather(1, t[:, None]).squeeze(1)
            total += ((lse[start:end] - picked) * valid[start:end]).sum()
        # no clamp: a batch whose targets are all ignored is 0/0 = NaN, as F.cross_entropy's mean is, so the
        # NaN policy sees it (it gave 0 here, a step that trained on nothing and looked healthy)
        count = valid.sum()
        ctx.save_for_backward(hidden, weight, target, lse, count)
        ctx.ignore_index, ctx.chunk = ignore_index, chunk
        return total / count

    @staticmethod
    def backward(ctx, grad_out):
        hidden, weight, target, lse, count = ctx.saved_tensors
        scale = _wide(grad_out / count.clamp(min=1))  # all ignored: zero gradients, as F.cross_entropy gives
        grad_h = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        # fp32 accumulation of the weight gradient over chunks, cast once at the end
        grad_w = torch.zeros(weight.shape, dtype=lse.dtype, device=weight.device) if ctx.needs_input_grad[1] else None
        valid = target != ctx.ignore_index
        for start in range(0, hidden.shape[0], ctx.chunk):
            end = min(start + ctx.chunk, hidden.shape[0])
            h = hidden[start:end]
            # d loss / d logits = softmax - onehot(target), zero on ignored rows
            g = torch.exp(_wide(h @ weight.t()) - lse[start:end, None])
            t = target[start:end].clamp(min=0)
            g.scatter_add_(1, t[:, None], torch.full_like(t[:, None], -1, dtype=g.dtype))
            g *= (valid[start:end, None] * scale)
            g = g.to(hidden.dtype)
            if grad_h is not None:
                grad_h[start:end] = g @ weight
            if grad_w is not None:
                grad_w += _product_wide(g.t(), h)
        return grad_h, None if grad_w is None else grad_w.to(weight.dtype), None, None, None


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, *,
                         ignore_index: int = -100, chunk: int = DEFAULT_CHUNK) -> torch.Tensor:
    """Mean cross-entropy of ``hidden @ weight.T`` against ``target``, over targets != ``ignore_index``.

    ``hidden`` is (..., d), ``weight`` (vocab, d), ``target`` hidden's leading shape. Under autocast both
    inputs are cast to the autocast dtype first, as a plain ``nn.Linear`` would be; the softmax is in fp32.
    """
    if hidden.shape[:-1] != target.shape:
        raise ValueError(f"hidden {tuple(hidden.shape)} and target {tuple(target.shape)} do not match")
    device_type = hidden.device.type
    if torch.is_autocast_enabled(device_type):
        dtype = torch.get_autocast_dtype(device_type)
        hidden, weight = hidden.to(dtype), weight.to(dtype)
    elif weight.dtype != hidden.dtype:
        weight = weight.to(hidden.dtype)
    with torch.autocast(device_type, enabled=False):
        return _LinearCrossEntropy.apply(hidden.reshape(-1, hidden.shape[-1]), weight, target.reshape(-1),
                                         int(ignore_index), int(chunk))


class FusedHead(nn.Linear):
    """An ``nn.Linear`` head that, while it holds the step's targets, returns the loss instead of logits.

    ``install`` turns a model's ``lm_head`` into one in place (its class only: the same weight, tied
    or not, the same state dict keys), so the loss is computed inside the model's own forward and
    DDP's and FSDP's forward hooks run as usual. Without targets (evaluation, generation) it is the
    plain Linear.
    """

    target: torch.Tensor | None = None
    chunk: int = DEFAULT_CHUNK
    impl: str = "rubin"  # or "liger"

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.target is None:
            return super().forward(hidden)
        if hidden.shape[:-1] != self.target.shape:
            raise UsageError(f"model.fused_loss: the head gets hidden states of shape {tuple(hidden.shape)} but the "
                             f"targets are {tuple(self.target.shape)} (the model slices positions before its head); "
                             "set model.fused_loss=false")
        if self.impl == "liger":
            return self._liger_loss(hidden)
        return linear_cross_entropy(hidden, self.weight, self.target, chunk=self.chunk)

    def _liger_loss(self, hidden: torch.Tensor) -> torch.Tensor:
        # made per call (a parameter-free Module, microseconds): kept on the head it would join the module tree
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

        liger = LigerFusedLinearCrossEntropyLoss(ignore_index=-100, reduction="mean")
        device_type, weight = hidden.device.type, self.weight
        if torch.is_autocast_enabled(device_type):  # the dtypes a plain Linear would see: Liger takes them as given
            dtype = torch.get_autocast_dtype(device_type)
            hidden, weight = hidden.to(dtype), weight.to(dtype)
        with torch.autocast(device_type, enabled=False):
            return liger(weight, hidden.reshape(-1, hidden.shape[-1]), self.target.reshape(-1))


def liger_missing() -> str | None:
    """Why Liger-Kernel's fused loss cannot be imported here (its package, or the Triton it needs), or None."""
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss  # noqa: F401
    except Exception as err:  # noqa: BLE001 - not installed, or a Triton it cannot load: either way, not usable
        return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:160]
    return None


def find_head(model: nn.Module) -> tuple[nn.Linear | None, str]:
    """(head, "") when the fused loss can take over the model's ``lm_head``, else (None, why not).

    Known heads: rubin's language models and Hugging Face causal LMs, whose ``lm_head`` is a Linear
    without bias fed the hidden state of every position. Models that scale or soft-cap the logits
    after the head (Gemma 2's final_logit_softcapping, Cohere's logit_scale) are refused.
    """
    head = getattr(model, "lm_head", None)
    if not isinstance(head, nn.Linear):
        return None, f"{type(model).__name__} has no lm_head Linear"
    if type(head) not in (nn.Linear, FusedHead):
        return None, f"its lm_head is a {type(head).__name__}, not a plain Linear"
    if head.bias is not None:
        return None, "its lm_head has a bias"
    config = getattr(model, "config", None)
    for key in ("final_logit_softcapping", "logit_scale", "output_multiplier_scale"):
        if getattr(config, key, None):
            return None, f"its config transforms the logits after the head ({key})"
    return head, ""


def install(model: nn.Module, chunk: int = DEFAULT_CHUNK, impl: str = "rubin") -> FusedHead:
    """Make ``model.lm_head`` a FusedHead computing the loss with IMPL, rubin's or Liger's (see ``find_head``
    for which heads qualify)."""
    head, why = find_head(model)
    if head is None:
        raise ValueError(f"no output head the fused loss knows: {why}")
    head.__class__ = FusedHead  # a subclass with no state of its own: the module keeps its weight and hooks
    head.chunk, head.impl = int(chunk), impl
    return head


@contextlib.contextmanager
def targets(head: FusedHead, target: torch.Tensor):
    """While inside, ``head`` returns the loss against ``target``."""
    head.target = target
    try:
        yield
    finally:
        head.target = None


def fused_lm_loss(model, idx: torch.Tensor, target: torch.Tensor, *, chunk: int = DEFAULT_CHUNK,
                  impl: str = "rubin") -> torch.Tensor:
    """Next-token loss of ``model`` on ``idx`` through its own forward, without the full logits (IMPL's)."""
    head = install(model, chunk, impl)
    with targets(head, target):
        out = model(idx)
    if isinstance(out, (tuple, list)):
        return out[0]
    return getattr(out, "logits", out)  # a Hugging Face output carries the loss where the logits were
