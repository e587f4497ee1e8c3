"""What a dataset tells the model builder and the trainer: the task and the shapes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from rubin.errors import UsageError

Task = Literal["classification", "lm"]


@dataclass(frozen=True)
class DataInfo:
    """Per-sample facts about a dataset.

    ``input_shape`` is one sample's input shape: ``(C, H, W)`` for images, ``(features,)`` for
    vectors, ``(seq_len,)`` for token windows. ``tokens_per_sample`` feeds tokens/s; it is
    ``seq_len`` for language-model data and 0 otherwise.
    """

    task: Task
    input_shape: tuple[int, ...]
    num_classes: Optional[int] = None
    vocab_size: Optional[int] = None
    seq_len: Optional[int] = None
    tokens_per_sample: int = 0

    def __post_init__(self):
        object.__setattr__(self, "input_shape", tuple(int(s) for s in self.input_shape))
        if self.task == "lm" and not self.tokens_per_sample and self.seq_len:
            object.__setattr__(self, "tokens_per_sample", int(self.seq_len))

    @classmethod
    def classification(cls, input_shape, num_classes: int) -> "DataInfo":
        return cls("classification", tuple(input_shape), num_classes=int(num_classes))

    @classmethod
    def lm(cls, seq_len: int, vocab_size: int) -> "DataInfo":
        return cls("lm", (int(seq_len),), vocab_size=int(vocab_size), seq_len=int(seq_len))


def info_from_dataset(dataset, task: Optional[str] = None, num_classes: Optional[int] = None,
                      vocab_size: Optional[int] = None, max_scan: int = 100_000) -> DataInfo:
    """Infer a DataInfo for a user dataset (``data.import``) from its first sample.

    The number of classes comes from ``num_classes``, then the dataset's ``num_classes`` or
    ``classes`` attribute, then a scan of the targets (only for datasets up to ``max_scan``
    samples, so a huge dataset never reads everything just to count labels).
    """
    import torch

    if len(dataset) == 0:
        raise UsageError("data.import returned an empty training dataset; it needs at least one sample")
    x, y = _pair(dataset[0])
    try:
        x, y = torch.as_tensor(x), torch.as_tensor(y)
    except (TypeError, ValueError, RuntimeError) as err:
        raise UsageError(f"data.import: item 0 of the training dataset is ({type(x).__name__}, {type(y).__name__}), which "
                         f"do not convert to tensors ({err}); return (input, target) as tensors or numbers") from None
    if task is None:
        # A target with the input's shape and integer tokens is next-token data.
        task = "lm" if (y.dim() == 1 and x.shape == y.shape and not x.is_floating_point()) else "classification"
    if task == "lm":
        seq_len = int(x.shape[-1])
        vocab = vocab_size or getattr(dataset, "vocab_size", None)
        if vocab is None:
            raise UsageError("the imported language-model dataset does not say its vocab size: give the dataset a "
                             "'vocab_size' attribute, or set model.args.vocab_size")
        return DataInfo.lm(seq_len, int(vocab))
    n = num_classes or getattr(dataset, "num_classes", None)
    if n is None and getattr(dataset, "classes", None) is not None:
        n = len(dataset.classes)
    if n is None:
        if len(dataset) > max_scan:
            raise UsageError(f"cannot infer the number of classes of a {len(dataset)}-sample imported dataset "
                             "without reading it all; set data.num_classes=N")
        n = 1 + max(int(torch.as_tensor(dataset[i][1]).max()) for i in range(len(dataset)))
    return DataInfo.classification(tuple(x.shape), int(n))


def _pair(item):
    """The (input, target) of one dataset item; any other shape is a one-line error naming what came back."""
    if isinstance(item, dict):
        raise UsageError(f"data.import: item 0 of the training dataset is a dict with keys {sorted(map(str, item))[:6]}; "
                         "each item must be an (input, target) pair: return (x, y) from __getitem__")
    if not isinstance(item, (tuple, list)) or len(item) != 2:
        what = f"a {type(item).__name__} of {len(item)}" if isinstance(item, (tuple, list)) else f"a {type(item).__name__}"
        raise UsageError(f"data.import: item 0 of the training dataset is {what}; each item must be an (input, target) "
                         "pair: return (x, y) from __getitem__")
    return item
