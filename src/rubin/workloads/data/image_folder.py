"""``root/<class>/<image>`` folders (PIL, imported lazily), with an optional train/ + val/ split."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import torch
from torch.utils.data import Dataset

from rubin.errors import UsageError, bad_value
from rubin.workloads.data.file_index import load_index
from rubin.workloads.info import DataInfo

EVAL_DIRS = ("val", "eval", "validation", "test")


class ImageFolder(Dataset):
    """Images scaled to [-1, 1], resized to ``size`` when they differ; targets are class indices."""

    def __init__(self, root: Path, samples: list, classes: list[str], size: tuple[int, int], channels: int):
        self.root, self.samples, self.classes = root, samples, classes
        self.size, self.mode = size, "L" if channels == 1 else "RGB"

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        from PIL import Image

        rel, target = self.samples[i]
        with Image.open(self.root / rel) as img:
            img = img.convert(self.mode)
            if img.size != (self.size[1], self.size[0]):
                img = img.resize((self.size[1], self.size[0]), Image.BILINEAR)
            a = np.asarray(img, dtype=np.float32)
        x = torch.from_numpy(a / 127.5 - 1.0)
        x = x.unsqueeze(0) if x.dim() == 2 else x.permute(2, 0, 1).contiguous()
        return x, torch.tensor(target)


def load_image_folder(root: Path, cache_dir: Optional[str], image_size: Optional[int], channels: int,
                      eval_dir: Optional[str]):
    if not root.is_dir():
        raise bad_value("data.path", str(root), "image_folder needs a directory of class folders",
                        "point data.path at root/ where root/<class>/<image>")
    split = _eval_split_dir(root, eval_dir)
    train_root = root / "train" if split else root
    train_index = load_index(train_root, cache_dir)
    classes = train_index["classes"]
    size = (image_size, image_size) if image_size else _first_size(train_root, train_index["samples"][0][0])
    train = ImageFolder(train_root.resolve(), train_index["samples"], classes, size, channels)
    held = None
    if split:
        eval_index = load_index(split, cache_dir)
        lookup = {c: i for i, c in enumerate(classes)}
        unknown = [c for c in eval_index["classes"] if c not in lookup]
        if unknown:
            raise UsageError(f"data.path={str(root)!r}: {split.name}/ has classes not in train/: "
                             f"{', '.join(unknown[:5])}; every eval class needs a train folder")
        remap = [lookup[c] for c in eval_index["classes"]]
        samples = [[rel, remap[ci]] for rel, ci in eval_index["samples"]]
        held = ImageFolder(split.resolve(), samples, classes, size, channels)
    return train, held, DataInfo.classification((channels, *size), len(classes))


def _eval_split_dir(root: Path, eval_dir: Optional[str]) -> Optional[Path]:
    if eval_dir is not None:
        if not (root / "train").is_dir() or not (root / eval_dir).is_dir():
            raise bad_value("data.args.eval_dir", eval_dir, f"needs {root}/train/ and {root}/{eval_dir}/",
                            "create both folders, or drop data.args.eval_dir")
        return root / eval_dir
    if (root / "train").is_dir():
        for name in EVAL_DIRS:
            if (root / name).is_dir():
                return root / name
    return None


def _first_size(root: Path, rel: str) -> tuple[int, int]:
    from PIL import Image

    with Image.open(root / rel) as img:  # reads the header only
        w, h = img.size
    return h, w
