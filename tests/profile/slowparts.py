"""A model and a dataset that can be slowed on one rank, for the profiling tests.

``PROFILE_SLOW="data:1:0.03"`` sleeps 30 ms per batch in rank 1's loader (spread over its samples);
``"compute:1:0.03"`` sleeps 30 ms in rank 1's forward. The sleeps sit where a slow disk and a slow
GPU would: inside the loader's ``__next__`` and inside the model's forward.
"""

from __future__ import annotations

import os
import time

import torch
from torch import nn

BATCH = 32


def _delay(part: str) -> float:
    spec = os.environ.get("PROFILE_SLOW", "")
    if not spec:
        return 0.0
    what, rank, seconds = spec.split(":")
    return float(seconds) if what == part and int(rank) == int(os.environ.get("RANK", "0")) else 0.0


class Data(torch.utils.data.Dataset):
    num_classes = 4

    def __init__(self, n: int = 2048):
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 64, generator=g), torch.randint(0, 4, (n,), generator=g)
        self.sleep = _delay("data") / BATCH

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.sleep:
            time.sleep(self.sleep)
        return self.x[i], self.y[i]


class Net(nn.Module):
    def __init__(self, width: int = 128):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 4))
        self.sleep = _delay("compute")

    def forward(self, x):
        if self.sleep:
            time.sleep(self.sleep)
        return self.body(x)


def model(**_):
    return Net()


def data(**_):
    return Data(), None
