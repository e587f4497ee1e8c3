"""The next batch copied to the GPU while this step computes.

On CUDA: batches come from pinned host memory, are copied with ``non_blocking=True`` on a side
stream, and the compute stream waits for that copy only when it takes the batch; the tensors are
marked as used by the compute stream so the allocator does not hand their memory back early. On a
CPU this is a plain move (the copy is a no-op), so the CPU path costs nothing.
"""

from __future__ import annotations

from typing import Iterator

import torch

from rubin.platform import device as dev


def _to(batch, device, non_blocking: bool):
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to(b, device, non_blocking) for b in batch)
    if isinstance(batch, dict):
        return {k: _to(v, device, non_blocking) for k, v in batch.items()}
    return batch


def _record(batch, stream) -> None:
    if isinstance(batch, torch.Tensor):
        dev.record_stream(batch, stream)
    elif isinstance(batch, (list, tuple)):
        for b in batch:
            _record(b, stream)
    elif isinstance(batch, dict):
        for b in batch.values():
            _record(b, stream)


class Prefetcher:
    """Wraps an iterator of host batches; yields device batches, one copied ahead on CUDA (AHEAD: the
    default; the CPU tests force it, with the device seam's stream functions stubbed).

    The next batch is taken from the iterator before this one's step runs, so before that step's
    checkpoint captures the RNG: a dataset that draws random numbers in this process must not draw
    them from the global RNG's position (``data.SeededSamples`` seeds each sample instead).

    ``close()`` closes the wrapped iterator (a DataLoader's workers stop with it).
    """

    def __init__(self, batches: Iterator, device, *, ahead: bool | None = None):
        self._it = iter(batches)
        self.device = device
        self._cuda = getattr(device, "type", None) == "cuda" if ahead is None else ahead
        self._stream = dev.new_stream(device) if self._cuda else None
        self._next = None
        self._done = False
        if self._cuda:
            self._preload()

    def _preload(self) -> None:
        try:
            host = next(self._it)
        except StopIteration:
            self._next, self._done = None, True
            return
        with dev.stream_context(self._stream):
            self._next = _to(host, self.device, non_blocking=True)

    def __iter__(self):
        return self

    def __next__(self):
        if not self._cuda:
            return _to(next(self._it), self.device, non_blocking=False)
        if self._done:
            raise StopIteration
        dev.wait_stream(self._stream)
        batch = self._next
        _record(batch, dev.current_stream(self.device))
        self._preload()  # the copy of the next batch overlaps the compute on this one
        return batch

    def close(self) -> None:
        # a generator closes; a DataLoader iterator stops its workers
        close = getattr(self._it, "close", None) or getattr(self._it, "_shutdown_workers", None)
        if close is not None:
            close()
        self._next = None

    _shutdown_workers = close  # what the trainer's exit paths call on a DataLoader iterator
