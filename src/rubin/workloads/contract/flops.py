"""Training FLOPs per sample for any model: the model's own figure, or a count of one step.

A model that defines ``flops_per_sample`` (the reference workloads do, analytically) is taken at
its word. Any other model gets one training step (forward + backward) counted by
``torch.utils.flop_counter.FlopCounterMode`` on the first micro-batch at start-up. The step runs
on the meta device through ``functional_call``: no arithmetic is done, no memory is taken, and
the real parameters, buffers (BatchNorm statistics) and RNG are untouched, so counting never
changes what is trained. A model whose forward needs real values (``.item()``, data-dependent
shapes) can't be counted that way; it gets no figure and a warning instead of a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Flops:
    per_sample: float | None
    source: str  # "model" (the model's flops_per_sample), "counted" (FlopCounterMode), or "unavailable"
    detail: str = ""

    @property
    def warning(self) -> str | None:
        if self.source != "unavailable":
            return None
        return (f"could not count the model's FLOPs ({self.detail}): MFU is not reported; "
                "give the model a flops_per_sample attribute or method")

    def as_dict(self) -> dict:
        return {"flops_per_sample": self.per_sample, "flops_source": self.source, **({"flops_detail": self.detail} if self.detail else {})}


def obtain(model, info, dataset, micro_batch: int, task: str) -> Flops:
    from rubin import workloads

    said = workloads.flops_per_sample(model, info)
    if said:
        return Flops(said, "model")
    try:
        batch = first_batch(dataset, micro_batch)
        total = count_step(model, *batch, task=task)
    except Exception as exc:  # noqa: BLE001 - any failure means "no figure", reported, never a crash
        return Flops(None, "unavailable", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300])
    if total <= 0:
        return Flops(None, "unavailable", "the counter saw no matmuls or convolutions")
    return Flops(total / batch[0].shape[0], "counted", f"FlopCounterMode, one step on {batch[0].shape[0]} samples")


def first_batch(dataset, micro_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    from torch.utils.data import default_collate

    n = max(1, min(micro_batch, len(dataset)))
    x, y = default_collate([dataset[i] for i in range(n)])
    return torch.as_tensor(x), torch.as_tensor(y)


def count_step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, task: str) -> float:
    """FLOPs of forward + backward on (x, y), counted on meta copies of everything."""
    from torch.func import functional_call
    from torch.utils.flop_counter import FlopCounterMode

    from rubin.workloads.contract.outputs import cross_entropy, logits_of, takes_targets

    meta, by_id = {}, {}  # a tied weight (embedding = head) gets one meta tensor under both names
    for name, p in model.named_parameters(remove_duplicate=False):
        meta[name] = by_id.setdefault(id(p), torch.empty_like(p, device="meta").requires_grad_(p.requires_grad))
    for name, b in model.named_buffers(remove_duplicate=False):
        meta[name] = by_id.setdefault(id(b), torch.empty_like(b, device="meta"))
    x, y = x.to("meta"), y.to("meta")
    kwargs = {"targets": y} if takes_targets(model) else {}
    was_training = model.training
    model.train()
    try:
        with torch.random.fork_rng(devices=[]), FlopCounterMode(display=False) as counter:  # dropout draws nothing real
            out = functional_call(model, meta, (x,), kwargs, tie_weights=True, strict=False)
            loss = cross_entropy(task, logits_of(out), y)
            loss.backward()
    finally:
        model.train(was_training)
    return float(counter.get_total_flops())
