"""The CIFAR-10 "python version" directory: data_batch_1..5, test_batch, batches.meta.

The batches are pickles. A pickle can run arbitrary code, so they are read with an unpickler
that only rebuilds plain containers and numpy arrays; anything else is refused.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from rubin.errors import UsageError, bad_value
from rubin.workloads.data.arrays import ArrayDataset

TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]
TEST_FILE = "test_batch"
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"), ("copyreg", "_reconstructor"), ("copy_reg", "_reconstructor"),
    ("builtins", "object"), ("__builtin__", "object"),
    # Python 3 writes bytes at protocol 2 as _codecs.encode(str, "latin1"): a pure conversion.
    ("_codecs", "encode"),
}


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def read_batch(path: Path) -> dict:
    with open(path, "rb") as f:
        try:
            obj = _SafeUnpickler(f, encoding="bytes").load()
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as err:
            raise UsageError(f"data.path: {path} is not a CIFAR-10 python batch ({err}); "
                             "use the 'python version' download (cifar-10-python.tar.gz), extracted") from None
    if not isinstance(obj, dict):
        raise UsageError(f"data.path: {path} holds a {type(obj).__name__}, not a CIFAR-10 batch dict")
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in obj.items()}


def find_dir(root: Path) -> Path:
    """The batch directory: ``root`` itself, or the usual ``cifar-10-batches-py`` inside it."""
    for cand in (root, root / "cifar-10-batches-py"):
        if (cand / TEST_FILE).is_file() or (cand / TRAIN_FILES[0]).is_file():
            return cand
    raise bad_value("data.path", str(root), "a CIFAR-10 python directory with data_batch_1..5 and test_batch",
                    "extract cifar-10-python.tar.gz and point data.path at cifar-10-batches-py/")


def _arrays(files: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for path in files:
        batch = read_batch(path)
        if "data" not in batch or "labels" not in batch:
            raise UsageError(f"data.path: {path} lacks 'data' or 'labels'; is it CIFAR-100? "
                             "(only CIFAR-10 batches are supported)")
        data = np.asarray(batch["data"], dtype=np.uint8)
        if data.ndim != 2 or data.shape[1] != 3072:
            raise UsageError(f"data.path: {path} has data of shape {data.shape}, expected (N, 3072)")
        xs.append(data.reshape(-1, 3, 32, 32))
        ys.append(np.asarray(batch["labels"], dtype=np.int64))
    return np.concatenate(xs), np.concatenate(ys)


def _classes(folder: Path) -> list[str]:
    meta = folder / "batches.meta"
    if meta.is_file():
        names = read_batch(meta).get("label_names")
        if names:
            return [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    return [str(i) for i in range(10)]


def _dataset(images: np.ndarray, labels: np.ndarray, classes: list[str], normalize: bool) -> ArrayDataset:
    x = torch.from_numpy(images).float().div_(255.0)
    if normalize:
        x = (x - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)
    return ArrayDataset(x, torch.from_numpy(labels), classes)


def load_cifar10(root: Path, normalize: bool = True):
    folder = find_dir(root)
    train_files = [folder / n for n in TRAIN_FILES if (folder / n).is_file()]
    if not train_files:
        raise bad_value("data.path", str(root), "no data_batch_1..5 found", "point data.path at cifar-10-batches-py/")
    classes = _classes(folder)
    train = _dataset(*_arrays(train_files), classes, normalize)
    held = _dataset(*_arrays([folder / TEST_FILE]), classes, normalize) if (folder / TEST_FILE).is_file() else None
    return train, held
