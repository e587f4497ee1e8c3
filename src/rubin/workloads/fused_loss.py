"""Linear + cross-entropy without the full logits: the language-model head and its loss in one step.

A plain head makes (tokens x vocab) logits, an fp32 copy for the softmax, and keeps both for the
backward: on GPT-124M at micro-batch 32 that is 19.8 GB of 30.8 GB of activations. Here the tokens
go through in chunks; each chunk's logits live only while that chunk is computed, the forward keeps
one log-sum-exp per token, and the backward recomputes each chunk's logits (one extra head matmul,
about 1/3 more head FLOPs) instead of storing them. Peak extra memory is one chunk's logits.

Maintained alternatives (cut-cross-entropy, Liger's fused linear cross-entropy) are Triton kernels:
CUDA only, so this torch version is the one that also runs, and is tested, on CPU.
"""

from __future__ import annotations

import torch

# Rows per chunk: 8192 x 50k-vocab fp32 logits are 1.6 GB; small enough to be noise beside the
# activations, big enough that each chunk's matmul still fills a GPU.
DEFAULT_CHUNK = 8192


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, target, ignore_index: int, chunk: int):
        n = hidden.shape[0]
        lse = torch.empty(n, dtype=torch.float32, device=hidden.device)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        valid = target != ignore_index
        for start in range(0, n, chunk):
            end = min(start + chunk, n)
            logits = (hidden[start:end] @ weight.t()).float()
            lse[start:end] = torch.logsumexp(logits, dim=-1)
            t = target[start:end].clamp(min=0)
            picked = logits.gather(1, t[:, None]).squeeze(1)
            total += ((lse[start:end] - picked) * valid[start:end]).sum()
        count = valid.sum().clamp(min=1)
        ctx.save_for_backward(hidden, weight, target, lse, count)
        ctx.ignore_index, ctx.chunk = ignore_index, chunk
        return total / count

    @staticmethod
    def backward(ctx, grad_out):
        hidden, weight, target, lse, count = ctx.saved_tensors
        scale = (grad_out / count).float()
        grad_h = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        # fp32 accumulation of the weight gradient over chunks, cast once at the end
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if ctx.needs_input_grad[1] else None
        valid = target != ctx.ignore_index
        for start in range(0, hidden.shape[0], ctx.chunk):
            end = min(start + ctx.chunk, hidden.shape[0])
            h = hidden[start:end]
            # d loss / d logits = softmax - onehot(target), zero on ignored rows
            g = torch.exp((h @ weight.t()).float() - lse[start:end, None])
            t = target[start:end].clamp(min=0)
            g.scatter_add_(1, t[:, None], torch.full_like(t[:, None], -1, dtype=g.dtype))
            g *= (valid[start:end, None] * scale)
            g = g.to(hidden.dtype)
            if grad_h is not None:
                grad_h[start:end] = g @ weight
            if grad_w is not None:
                grad_w += (g.t() @ h).float()
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


def find_head(model) -> tuple[object, torch.nn.Linear] | None:
    """(body, head) of a language model whose head the fused loss can take over, else None.

    Known: rubin's LMs (``hidden(idx)`` plus ``lm_head``) and Hugging Face causal LMs (``model``
    plus ``lm_head``, the body returning ``last_hidden_state``). A head with a bias or a model that
    scales or soft-caps its logits is not a plain linear and is refused.
    """
    head = getattr(model, "lm_head", None)
    if not isinstance(head, torch.nn.Linear) or head.bias is not None:
        return None
    if callable(getattr(model, "hidden", None)):
        return model.hidden, head
    config = getattr(model, "config", None)
    if getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
        return None
    body = getattr(model, "model", None)
    if isinstance(body, torch.nn.Module):
        return (lambda idx: body(input_ids=idx).last_hidden_state), head
    return None


def fused_lm_loss(model, idx: torch.Tensor, target: torch.Tensor, *, chunk: int = DEFAULT_CHUNK) -> torch.Tensor:
    """Next-token loss of ``model`` on ``idx`` through its head without the full logits."""
    found = find_head(model)
    if found is None:
        raise ValueError(f"{type(model).__name__} has no output head the fused loss knows")
    body, head = found
    return linear_cross_entropy(body(idx), head.weight, target, chunk=chunk)
