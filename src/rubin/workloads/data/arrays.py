"""In-memory datasets and deterministic splits shared by the dataset builders."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset


class ArrayDataset(Dataset):
    """(inputs[i], targets[i]) from two tensors already in memory."""

    def __init__(self, inputs: torch.Tensor, targets: torch.Tensor, classes: list[str] | None = None):
        if len(inputs) != len(targets):
            raise ValueError(f"{len(inputs)} inputs but {len(targets)} targets")
        self.inputs, self.targets = inputs, targets
        if classes is not None:
            self.classes = classes

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int):
        return self.inputs[i], self.targets[i]


def stratified_split(labels: np.ndarray, eval_fraction: float, split_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Train and eval indices, taking ``eval_fraction`` of every class.

    The split depends only on ``split_seed`` (not on the run's seed), so runs with different
    seeds are evaluated on the same samples and their metrics compare.
    """
    rng = np.random.default_rng(split_seed)
    train, held = [], []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        rng.shuffle(idx)
        n_eval = int(round(len(idx) * eval_fraction))
        held.append(idx[:n_eval])
        train.append(idx[n_eval:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(held))


def sample_generator(seed: int, index: int, stream: int = 0) -> torch.Generator:
    """A generator for one sample: the same (seed, index, stream) always gives the same draws,
    whichever worker or process asks, and the global RNG is never touched."""
    g = torch.Generator()
    g.manual_seed(int(np.random.SeedSequence([seed & 0xFFFFFFFF, index, stream]).generate_state(1)[0]))
    return g
