"""scikit-learn's bundled digits: 1797 real 8x8 grayscale images of 10 digits, no download."""

from __future__ import annotations

import numpy as np
import torch

from rubin.workloads.data.arrays import ArrayDataset, stratified_split


def load_digits_split(eval_fraction: float, split_seed: int):
    """(train, eval) ArrayDatasets of (1, 8, 8) float images, standardized with train statistics."""
    from sklearn.datasets import load_digits  # imported here: sklearn takes a second to import

    bunch = load_digits()
    images = bunch.images.astype(np.float32) / 16.0
    labels = bunch.target.astype(np.int64)
    if eval_fraction > 0:
        train_idx, eval_idx = stratified_split(labels, eval_fraction, split_seed)
    else:
        train_idx, eval_idx = np.arange(len(labels)), np.arange(0)
    mean, std = images[train_idx].mean(), images[train_idx].std()
    x = torch.from_numpy((images - mean) / std).unsqueeze(1).contiguous()
    y = torch.from_numpy(labels)
    classes = [str(c) for c in range(10)]
    train = ArrayDataset(x[train_idx], y[train_idx], classes)
    held = ArrayDataset(x[eval_idx], y[eval_idx], classes) if len(eval_idx) else None
    return train, held
