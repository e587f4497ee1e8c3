"""Evaluation: accuracy or perplexity over the eval split, summed over every rank.

The loss itself is the workload contract's (``rubin.workloads.contract.outputs``)."""

from __future__ import annotations

import math

import torch

from rubin.workloads.contract.outputs import cross_entropy, forward, logits_of, takes_targets


@torch.no_grad()
def evaluate(model, loader, task: str, device, precision, info) -> dict:
    """Accuracy (classification) or loss and perplexity (lm), summed over all ranks."""
    was_training = model.training
    model.eval()
    total_loss = torch.zeros((), dtype=torch.float64)
    correct = torch.zeros((), dtype=torch.float64)
    count = torch.zeros((), dtype=torch.float64)
    pass_targets = takes_targets(model)
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with precision.autocast():
            out = logits_of(forward(model, x, y, pass_targets))
        loss = cross_entropy(task, out, y, reduction="sum")
        if task == "lm":
            n = y.numel()
        else:
            correct += (out.argmax(-1) == y).sum().double().cpu()
            n = y.shape[0]
        total_loss += loss.double().cpu()
        count += n
    if info.world_size > 1:
        import torch.distributed as dist

        stats = torch.stack([total_loss, correct, count])
        if info.backend == "nccl":
            stats = stats.to(device)
        dist.all_reduce(stats)
        total_loss, correct, count = stats.cpu().unbind()
    if was_training:
        model.train()
    n = max(float(count), 1.0)
    result = {"eval_loss": float(total_loss) / n, "samples": int(count)}
    if task == "lm":
        result["perplexity"] = math.exp(min(result["eval_loss"], 50.0))
    else:
        result["accuracy"] = float(correct) / n
    return result
