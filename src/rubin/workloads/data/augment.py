"""Random image augmentation drawn where torchvision draws it: from the global torch RNG, per sample,
inside the DataLoader worker that loads it.

Opt in with ``data.args.augment: true`` (digits, synthetic_images). The dataset carries
``seed_per_sample = True``, which tells ``rubin.train.data`` to seed the worker's RNGs for each
sample from (run seed, epoch, position in the epoch). Those three are in every checkpoint, so
after a resume the workers draw exactly the shifts and noise they drew in the first run.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from rubin.errors import bad_value


def check_augment(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise bad_value(name, value, "true or false", f"--set {name}=true")
    return value


class RandomShiftNoise(Dataset):
    """Each draw moves the image by up to ``shift`` pixels each way (zero fill) and adds N(0, noise^2) per pixel."""

    seed_per_sample = True  # see rubin.train.data.SeededSamples

    def __init__(self, base: Dataset, shift: int = 1, noise: float = 0.1):
        self.base, self.shift, self.noise = base, int(shift), float(noise)
        if hasattr(base, "classes"):
            self.classes = base.classes

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int):
        x, y = self.base[i]
        s = self.shift
        if s:
            dy, dx = (torch.randint(-s, s + 1, (2,)) + s).tolist()
            h, w = x.shape[-2:]
            x = F.pad(x, (s, s, s, s))[..., dy : dy + h, dx : dx + w]
        if self.noise:
            x = x + self.noise * torch.randn(x.shape)
        return x, y
