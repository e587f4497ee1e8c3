"""Synthetic datasets that are generated per index (any size, no memory) and are learnable.

Each sample is drawn from a generator seeded by (seed, index), so a dataset is the same in every
worker and every process, and the loss goes down because there is a rule to learn.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

from rubin.workloads.data.arrays import sample_generator


class SyntheticImages(Dataset):
    """Class c is a fixed random prototype image plus Gaussian noise (signal-to-noise ~ 1)."""

    def __init__(self, num_samples: int, shape: tuple[int, int, int], num_classes: int, seed: int, stream: int,
                 noise: float = 1.0):
        self.num_samples, self.shape, self.num_classes = num_samples, shape, num_classes
        self.seed, self.stream, self.noise = seed, stream, noise
        g = sample_generator(seed, 0, stream=0xFFFE)
        self.prototypes = torch.randn((num_classes, *shape), generator=g)

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, i: int):
        g = sample_generator(self.seed, i, self.stream)
        y = int(torch.randint(self.num_classes, (1,), generator=g))
        x = self.prototypes[y] + self.noise * torch.randn(self.shape, generator=g)
        return x, torch.tensor(y)


class SyntheticVectors(Dataset):
    """x ~ N(0, I); the label is the argmax of a fixed random linear teacher W x."""

    def __init__(self, num_samples: int, features: int, num_classes: int, seed: int, stream: int):
        self.num_samples, self.features, self.num_classes = num_samples, features, num_classes
        self.seed, self.stream = seed, stream
        self.teacher = torch.randn((num_classes, features), generator=sample_generator(seed, 0, stream=0xFFFF))

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, i: int):
        x = torch.randn(self.features, generator=sample_generator(self.seed, i, self.stream))
        return x, (self.teacher @ x).argmax()


class SyntheticTokens(Dataset):
    """Token sequences from a hidden chain: next = perm[(perm^-1[cur] + step) mod V], with a
    ``noise`` share of random tokens. A bigram model can learn it, so the loss falls well
    below log(V); the noise keeps it from reaching zero."""

    def __init__(self, num_samples: int, seq_len: int, vocab_size: int, seed: int, stream: int, noise: float = 0.1):
        self.num_samples, self.seq_len, self.vocab_size = num_samples, seq_len, vocab_size
        self.seed, self.stream, self.noise = seed, stream, noise
        rng = np.random.default_rng([seed & 0xFFFFFFFF, 0xFFFF])
        self.perm = rng.permutation(vocab_size)
        self.step = int(rng.integers(1, max(vocab_size, 2)))

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, i: int):
        rng = np.random.default_rng([self.seed & 0xFFFFFFFF, i, self.stream])
        n, v = self.seq_len + 1, self.vocab_size
        reset = rng.random(n) < self.noise
        reset[0] = True
        # Within a run between resets the hidden value advances by `step`; a reset draws a new start.
        starts = rng.integers(0, v, n)
        seg = np.cumsum(reset) - 1
        seg_start_pos = np.flatnonzero(reset)
        offset = np.arange(n) - seg_start_pos[seg]
        hidden = (starts[seg_start_pos][seg] + offset * self.step) % v
        tokens = torch.from_numpy(self.perm[hidden].astype(np.int64))
        return tokens[:-1], tokens[1:]
