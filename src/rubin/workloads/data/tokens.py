"""Token files: text (byte-level tokens, vocab 256) or nanoGPT's .bin of uint16 tokens.

Samples are non-overlapping windows of ``seq_len + 1`` tokens (consecutive windows share only
their boundary token), so sample i is always the same tokens. The last ``eval_fraction`` of the
windows is the eval split. The file is memory-mapped, and opened lazily in each process, so
DataLoader workers never copy it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import torch
from torch.utils.data import Dataset

from rubin.errors import UsageError, bad_value
from rubin.workloads.info import DataInfo

BIN_SUFFIXES = (".bin", ".u16", ".npy16")
DEFAULT_BIN_VOCAB = 50304  # GPT-2's 50257 padded to a multiple of 64
CHECK_TOKENS = 1 << 24  # tokens checked against the vocab up front (the rest is checked per window)


class TokenWindows(Dataset):
    def __init__(self, path: Path, dtype: str, seq_len: int, first: int, count: int, vocab_size: int):
        self.path, self.dtype, self.seq_len = path, dtype, seq_len
        self.first, self.count, self.vocab_size = first, count, vocab_size
        self._data = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_data"] = None  # each worker maps the file itself
        return state

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int):
        if not 0 <= i < self.count:
            raise IndexError(i)
        if self._data is None:
            self._data = np.memmap(self.path, dtype=self.dtype, mode="r")
        start = (self.first + i) * self.seq_len
        window = torch.from_numpy(self._data[start:start + self.seq_len + 1].astype(np.int64))
        if int(window.max()) >= self.vocab_size:
            raise ValueError(f"{self.path}: token {int(window.max())} in window {self.first + i} is >= "
                             f"vocab_size {self.vocab_size}; set data.args.vocab_size")
        return window[:-1], window[1:]


def load_tokens(path: Path, seq_len: int, vocab_size: Optional[int], eval_fraction: float, dtype: str):
    if not path.is_file():
        raise bad_value("data.path", str(path), "a text file or a .bin token file", "point data.path at a file")
    is_bin = path.suffix.lower() in BIN_SUFFIXES
    dtype = dtype if is_bin else "uint8"
    width = np.dtype(dtype).itemsize
    size = path.stat().st_size
    if size % width:
        raise UsageError(f"data.path={str(path)!r}: {size} bytes is not a whole number of {dtype} tokens; "
                         "is it really a token .bin file? (set data.args.dtype)")
    n_tokens = size // width
    vocab = vocab_size or (DEFAULT_BIN_VOCAB if is_bin else 256)
    if n_tokens:
        head = np.memmap(path, dtype=dtype, mode="r")[:CHECK_TOKENS]
        top = int(head.max())
        if top >= vocab:
            raise bad_value("data.args.vocab_size", vocab, f"larger than the largest token {top} in {path.name}",
                            f"--set data.args.vocab_size={top + 1}")
    windows = (n_tokens - 1) // seq_len if n_tokens > seq_len else 0
    n_eval = int(round(windows * eval_fraction))
    if windows - n_eval < 1:
        raise bad_value("data.args.seq_len", seq_len, f"{path.name} holds {n_tokens} tokens, too few for one "
                        f"training window of {seq_len + 1} (plus {eval_fraction:.0%} eval)",
                        "use a shorter seq_len or a bigger file")
    train = TokenWindows(path, dtype, seq_len, 0, windows - n_eval, vocab)
    held = TokenWindows(path, dtype, seq_len, windows - n_eval, n_eval, vocab) if n_eval else None
    return train, held, DataInfo.lm(seq_len, vocab)
