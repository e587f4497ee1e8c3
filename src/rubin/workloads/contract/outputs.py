"""The forward contract: what a model may return, and how a mismatch with the data is reported.

A model's ``forward(x)`` may return the logits as a tensor, an object with ``.logits`` (Hugging
Face ``ModelOutput``), a dict with ``"logits"``, or a tuple/list whose first element is the
logits (nanoGPT returns ``(logits, loss)``). Anything else is a one-line user error naming
what came back. Shapes are checked once, on the first batch, so later steps pay nothing.
"""

from __future__ import annotations

from typing import Callable

import torch

from rubin.errors import UsageError

EXPECTED = "a tensor of logits, an object with .logits, a dict with 'logits', or a tuple/list whose first element is the logits"


def logits_of(output) -> torch.Tensor:
    """The logits inside whatever ``forward`` returned."""
    if isinstance(output, torch.Tensor):
        return output
    found = None
    if isinstance(output, dict) or hasattr(output, "keys") and hasattr(output, "__getitem__"):
        try:
            found = output["logits"]
        except (KeyError, TypeError, IndexError):
            found = None
    if found is None and not isinstance(output, (dict, str)):
        found = getattr(output, "logits", None)
    if found is None and isinstance(output, (tuple, list)) and output:
        found = output[0]
    if isinstance(found, torch.Tensor):
        return found
    raise UsageError(f"the model's forward returned {_describe(output)}; expected {EXPECTED}")


def _describe(obj) -> str:
    name = type(obj).__module__ + "." + type(obj).__qualname__ if type(obj).__module__ != "builtins" else type(obj).__name__
    if isinstance(obj, dict):
        return f"a {name} with keys {sorted(map(str, obj))[:8]}"
    if isinstance(obj, (tuple, list)):
        inner = type(obj[0]).__name__ if obj else "nothing"
        return f"a {name} of {len(obj)} whose first element is {inner}"
    return f"a {name}"


def _shape(t: torch.Tensor) -> str:
    return str(tuple(int(s) for s in t.shape))


def check_batch(task: str, logits: torch.Tensor, target: torch.Tensor, num_classes: int | None) -> str | None:
    """Raise on a shape or dtype mismatch; return a warning text for a class-count difference."""
    if target.is_floating_point() or target.is_complex() or target.dtype == torch.bool:
        raise UsageError(f"task={task}: the dataset's targets are {target.dtype}, shape {_shape(target)}; "
                         "cross-entropy needs integer class indices (torch.long): return y as an integer tensor")
    if task == "lm":
        if target.dim() != 2:
            raise UsageError(f"task=lm: targets have shape {_shape(target)}, expected (batch, seq_len) token ids; "
                             "for one label per sample set data.task=classification")
        b, t = target.shape
        if logits.dim() == 3 and logits.shape[0] == b and logits.shape[1] == 1 and t > 1:
            raise UsageError(f"task=lm: the model returned logits for the last position only: logits {_shape(logits)} "
                             f"against targets {_shape(target)}; return logits for every position (nanoGPT does when "
                             "forward is given targets, or compute them with lm_head over the whole sequence)")
        if logits.dim() != 3 or tuple(logits.shape[:2]) != (b, t):
            raise UsageError(f"task=lm: logits have shape {_shape(logits)}, targets {_shape(target)}; expected logits "
                             f"(batch, seq_len, vocab) = ({b}, {t}, V)")
        width, label_max = logits.shape[-1], None
    else:
        if target.dim() != 1:
            raise UsageError(f"task=classification: targets have shape {_shape(target)}, expected (batch,) class indices; "
                             "for next-token data set data.task=lm")
        if logits.dim() != 2 or logits.shape[0] != target.shape[0]:
            raise UsageError(f"task=classification: logits have shape {_shape(logits)}, targets {_shape(target)}; "
                             f"expected logits (batch, num_classes) = ({target.shape[0]}, C)")
        width, label_max = logits.shape[-1], int(target.max()) if target.numel() else None
    what = "vocab size" if task == "lm" else "number of classes"
    if num_classes is not None and width < num_classes:
        raise UsageError(f"task={task}: the model outputs {width} logits per position but the data's {what} is {num_classes}; "
                         "the output layer must be at least that wide (set the model's num_classes / vocab_size)")
    if label_max is not None and label_max >= width:
        raise UsageError(f"task={task}: a target is class {label_max} but the model outputs only {width} logits; "
                         "the output layer must be wider than the largest class index (set the model's num_classes)")
    if num_classes is None:
        return None
    if width != num_classes and task != "lm":  # a padded vocab (nanoGPT's 50304) is deliberate
        return (f"the model outputs {width} logits but the data's {what} is {num_classes}: {width - num_classes} outputs "
                "are never a target; set the model's output width to match (e.g. model.args.num_classes)")
    return None


_WRAPPERS = ("DistributedDataParallel", "DataParallel", "OptimizedModule")


def takes_targets(model) -> bool:
    """Whether ``forward`` has a ``targets`` parameter (nanoGPT's convention: given targets, it returns
    logits for every position, not just the last). Wrappers (DDP, torch.compile) are looked through."""
    import inspect

    inner = model
    while type(inner).__name__ in _WRAPPERS:
        inner = getattr(inner, "_orig_mod", None) or inner.module
    try:
        return "targets" in inspect.signature(inner.forward).parameters
    except (TypeError, ValueError):
        return False


def forward(model, x: torch.Tensor, y: torch.Tensor, pass_targets: bool):
    return model(x, targets=y) if pass_targets else model(x)


class Objective:
    """The loss the loop minimizes. The first call checks the contract; later calls only compute."""

    def __init__(self, task: str, num_classes: int | None, model, warn: Callable[[str], None] = lambda msg: None,
                 head=None):
        self.task, self.num_classes, self.warn = task, num_classes, warn
        self.pass_targets = takes_targets(model)
        self.checked = False
        self.head = head  # a FusedHead (rubin.workloads.fused_loss): the model's forward returns the loss itself

    def __call__(self, model, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if self.head is not None:
            return self._fused(model, x, target)
        logits = logits_of(forward(model, x, target, self.pass_targets))
        if not self.checked:
            message = check_batch(self.task, logits, target, self.num_classes)
            self.checked = True
            if message:
                self.warn(message)
        return cross_entropy(self.task, logits, target)


    def _fused(self, model, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        from rubin.workloads.fused_loss import targets

        if not self.checked:  # the logits never exist: check what can be checked without them
            if target.is_floating_point() or target.dim() != 2:
                raise UsageError(f"task=lm: targets are {target.dtype} of shape {_shape(target)}; expected (batch, seq_len) "
                                 "integer token ids")
            if self.num_classes is not None and self.head.out_features < self.num_classes:
                raise UsageError(f"task=lm: the model's head outputs {self.head.out_features} logits but the data's vocab "
                                 f"size is {self.num_classes}; set the model's vocab_size to at least that")
            self.checked = True
        with targets(self.head, target):
            loss = logits_of(forward(model, x, target, self.pass_targets))
        return loss


def cross_entropy(task: str, logits: torch.Tensor, target: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    if task == "lm":
        return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)), target.reshape(-1), reduction=reduction)
    return torch.nn.functional.cross_entropy(logits.float(), target, reduction=reduction)


def loss_fn(task: str, output, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of whatever ``forward`` returned."""
    return cross_entropy(task, logits_of(output), target)
