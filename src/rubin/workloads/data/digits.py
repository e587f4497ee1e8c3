"""scikit-learn's bundled digits: 1797 real 8x8 grayscale images of 10 digits, no download."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import torch

from rubin.workloads.data.arrays import ArrayDataset, stratified_split


def read_digits() -> tuple[np.ndarray, np.ndarray]:
    """(images (1797, 8, 8) in 0..16, labels) from the CSV that scikit-learn ships.

    The file is read directly: importing sklearn takes about a second and sets OpenMP
    environment variables (KMP_*) in this process, both unwelcome at every training start.
    """
    spec = importlib.util.find_spec("sklearn")  # locates the package without importing it
    csv = os.path.join(spec.submodule_search_locations[0], "datasets", "data", "digits.csv.gz") if spec else ""
    if os.path.isfile(csv):
        table = np.loadtxt(csv, delimiter=",")
        return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits  # a layout we don't know: the public API

    bunch = load_digits()
    return bunch.images, bunch.target.astype(np.int64)


def load_digits_split(eval_fraction: float, split_seed: int, label_noise: float = 0.0):
    """(train, eval) ArrayDatasets of (1, 8, 8) float images, standardized with train statistics.

    ``label_noise`` shuffles the labels of that share of the TRAIN samples among themselves (the eval
    set stays clean): a simulated data-pipeline bug, used to measure what ``rubin verify`` catches.
    """
    images, labels = read_digits()
    images = images.astype(np.float32) / 16.0
    if eval_fraction > 0:
        train_idx, eval_idx = stratified_split(labels, eval_fraction, split_seed)
    else:
        train_idx, eval_idx = np.arange(len(labels)), np.arange(0)
    mean, std = images[train_idx].mean(), images[train_idx].std()
    x = torch.from_numpy((images - mean) / std).unsqueeze(1).contiguous()
    if label_noise > 0:
        labels = labels.copy()
        rng = np.random.default_rng([split_seed, 0x1AB])
        picked = rng.choice(train_idx, size=int(round(label_noise * len(train_idx))), replace=False)
        labels[picked] = labels[rng.permutation(picked)]
    y = torch.from_numpy(labels)
    classes = [str(c) for c in range(10)]
    train = ArrayDataset(x[train_idx], y[train_idx], classes)
    held = ArrayDataset(x[eval_idx], y[eval_idx], classes) if len(eval_idx) else None
    return train, held
