"""Batches: the global batch, its split into per-rank micro-batches, and a resumable sampler.

The data order is defined over the GLOBAL batch, not per rank: epoch e is a seeded permutation,
and optimizer step k of that epoch consumes global samples [k*B, (k+1)*B). Rank r's micro-step m
reads the slice m*world+r of it. So one process with accumulation, N DDP ranks and a resume at
another world size all see exactly the same samples per step; the sampler position is just
"global samples consumed this epoch", which needs no remapping when the world size changes.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler, get_worker_info

from rubin.errors import UsageError


@dataclass(frozen=True)
class BatchPlan:
    global_batch: int
    micro_batch: int
    accum_steps: int
    world_size: int


def plan_batches(batch_size: int, micro_batch_size: int | None, world_size: int) -> BatchPlan:
    if batch_size % world_size:
        raise UsageError(
            f"data.batch_size={batch_size} does not divide over {world_size} ranks: the global batch must be a "
            f"multiple of the world size; use e.g. {max(world_size, batch_size // world_size * world_size)}"
        )
    per_rank = batch_size // world_size
    micro = micro_batch_size or per_rank
    if per_rank % micro:
        raise UsageError(
            f"data.micro_batch_size={micro} does not divide the per-rank batch {per_rank} "
            f"(data.batch_size={batch_size} over {world_size} ranks); use a divisor of {per_rank}"
        )
    return BatchPlan(batch_size, micro, per_rank // micro, world_size)


class GlobalBatchSampler(Sampler[list]):
    """Yields this rank's micro-batches (lists of sample indices) from a resumable position.

    A batch sampler, not a per-index one: the DataLoader then takes each micro-batch whole,
    instead of pulling indices one by one through a generator (host time on every sample).
    """

    def __init__(self, n: int, plan: BatchPlan, rank: int, *, seed: int, shuffle: bool = True):
        self.n, self.plan, self.rank, self.seed, self.shuffle = n, plan, rank, seed, shuffle
        self.epoch = 0
        self.start_sample = 0  # global samples already consumed in this epoch
        self.sample_seeds = False  # yield (index, seed) pairs for SeededSamples

    def steps_per_epoch(self) -> int:
        return self.n // self.plan.global_batch

    def set_epoch(self, epoch: int, start_sample: int = 0) -> None:
        self.epoch, self.start_sample = epoch, start_sample

    def _order(self) -> torch.Tensor:
        if not self.shuffle:
            return torch.arange(self.n)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return torch.randperm(self.n, generator=g)

    def __iter__(self):
        order = self._order().tolist()  # once per epoch: slicing a list per micro-batch is cheap, a tensor's is not
        p = self.plan
        first_step = self.start_sample // p.global_batch
        for step in range(first_step, self.steps_per_epoch()):
            base = step * p.global_batch
            for m in range(p.accum_steps):
                lo = base + (m * p.world_size + self.rank) * p.micro_batch
                indices = order[lo : lo + p.micro_batch]
                if self.sample_seeds:
                    yield [(index, sample_seed(self.seed, self.epoch, pos)) for pos, index in enumerate(indices, lo)]
                else:
                    yield indices

    def __len__(self) -> int:
        """Micro-batches left in this epoch."""
        steps = self.steps_per_epoch() - self.start_sample // self.plan.global_batch
        return max(0, steps) * self.plan.accum_steps


def sample_seed(seed: int, epoch: int, position: int) -> int:
    """A 63-bit seed for the sample at POSITION of EPOCH's global order (splitmix64 of the three).

    It depends on nothing a resume can change: not on the worker that loads the sample, the
    number of workers or ranks, prefetching, or how many samples a worker drew before.
    """
    z = (seed * 0x9E3779B97F4A7C15 + epoch * 0xBF58476D1CE4E5B9 + position) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) >> 1


class SeededSamples(Dataset):
    """Loads ``dataset[index]`` for an (index, seed) key, with the RNGs seeded from SEED first.

    This is how the data RNG is checkpointed: instead of snapshotting each worker's generator
    (whose position depends on prefetching and on which worker drew what), every sample's draws
    are a function of (run seed, epoch, position in the epoch), and those are in the checkpoint.
    A resumed run therefore replays augmentation exactly, with any number of workers or ranks.
    Used for datasets that set ``seed_per_sample``.

    Without workers (``num_workers=0``) the training process loads the samples, and it seeds them
    the same way inside a saved-and-restored RNG state (``_kept_rng``): the draws do not depend on
    when a batch is loaded (on CUDA the prefetcher loads the next step's batch before this step's
    checkpoint captures the RNG), and the training process's own streams (dropout) do not move.
    """

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key):
        return self.__getitems__([key])[0]

    def __getitems__(self, keys: list) -> list:
        """A whole micro-batch (the DataLoader's fetcher calls this): one RNG save and restore per batch."""
        with contextlib.nullcontext() if get_worker_info() is not None else _kept_rng():
            out = []
            for index, seed in keys:
                _seed_cpu_rngs(seed)
                out.append(self.dataset[index])
            return out


def _seed_cpu_rngs(seed: int) -> None:
    """torch's CPU generator (not ``torch.manual_seed``, which would also reseed CUDA's), numpy, random."""
    torch.random.default_generator.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


@contextlib.contextmanager
def _kept_rng():
    saved = torch.random.default_generator.get_state(), np.random.get_state(), random.getstate()
    try:
        yield
    finally:
        torch.random.default_generator.set_state(saved[0])
        np.random.set_state(saved[1])
        random.setstate(saved[2])


class EvalSampler(Sampler[int]):
    """Every eval sample exactly once over all ranks (strided), in order."""

    def __init__(self, n: int, rank: int, world_size: int):
        self.indices = list(range(rank, n, world_size))

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return len(self.indices)


def _loader_kwargs(cfg, device) -> dict:
    workers = cfg.num_workers
    kw = {
        "num_workers": workers,
        "pin_memory": cfg.pin_memory if cfg.pin_memory is not None else device.type == "cuda",
    }
    if workers > 0:
        from rubin.train.faults import worker_init
        from rubin.train.faults.preemption import reap_workers_at_exit

        reap_workers_at_exit()  # workers ignore SIGTERM; they must still never block this process's exit
        kw["persistent_workers"] = cfg.persistent_workers
        kw["worker_init_fn"] = worker_init
        if cfg.prefetch_factor:
            kw["prefetch_factor"] = cfg.prefetch_factor
    return kw


def train_loader(dataset, sampler: GlobalBatchSampler, cfg, device, seed: int) -> DataLoader:
    # A private generator: DataLoader draws worker base seeds from it, not from the global RNG,
    # so starting an epoch does not perturb the model's dropout stream (exact resume).
    if getattr(dataset, "seed_per_sample", False):
        dataset, sampler.sample_seeds = SeededSamples(dataset), True
    return DataLoader(
        dataset,
        batch_sampler=sampler,
        generator=torch.Generator().manual_seed(seed),
        **_loader_kwargs(cfg, device),
    )


def eval_loader(dataset, rank: int, world_size: int, batch: int, cfg, device) -> DataLoader:
    kw = _loader_kwargs(cfg, device)
    kw["persistent_workers"] = False
    kw.pop("prefetch_factor", None) if not kw.get("num_workers") else None
    return DataLoader(dataset, batch_size=batch, sampler=EvalSampler(len(dataset), rank, world_size), **kw)


class StepBatches:
    """The micro-batches of each optimizer step, read on from the loop position (``LoopState``)."""

    def __init__(self, loader: DataLoader, sampler: GlobalBatchSampler, plan: BatchPlan, device=None):
        self.loader, self.sampler, self.plan, self.device = loader, sampler, plan, device
        self.iterator = None

    def next(self, loop) -> list | None:
        """The next step's micro-batches; None at an epoch's end (LOOP moves to the next epoch) or for a
        window skipped after a rollback (LOOP moves past it)."""
        if self.iterator is None:
            self.restart(loop)
        try:
            batches = [next(self.iterator) for _ in range(self.plan.accum_steps)]
        except StopIteration:
            loop.epoch, loop.sample_in_epoch = loop.epoch + 1, 0
            self.iterator = None
            return None
        if [loop.epoch, loop.sample_in_epoch] in loop.data_skips:  # the window that produced a NaN before a rollback
            loop.sample_in_epoch += self.plan.global_batch
            return None
        return batches

    def restart(self, loop) -> None:
        """Read from LOOP's position on: at the start, a resume, a new epoch, a rollback."""
        self.sampler.set_epoch(loop.epoch, loop.sample_in_epoch)
        self.iterator = batches(self.loader, self.device)

    def epoch_float(self, loop) -> float:
        per_epoch = self.sampler.steps_per_epoch() * self.plan.global_batch
        return loop.epoch + loop.sample_in_epoch / max(1, per_epoch)


def shut_down_workers(*loaders) -> None:
    """Stop the worker processes behind these DataLoaders or their iterators now (None is skipped).

    The trainer calls this on every exit path: a persistent worker left alive keeps the process
    from exiting (workers ignore SIGTERM, see ``faults.worker_init``).
    """
    for obj in loaders:
        it = getattr(obj, "_iterator", None) if isinstance(obj, DataLoader) else obj
        it = getattr(it, "_it", it)  # the prefetcher's own DataLoader iterator
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            try:
                shutdown()
            except Exception:  # noqa: BLE001 - already half torn down; the exit-time reaper is the backstop
                pass


def batches(loader: DataLoader, device=None):
    """The loader's batches; on CUDA through the prefetcher (the next one copied while this step computes)."""
    if getattr(device, "type", None) != "cuda":
        return iter(loader)
    from rubin.train.speed.prefetch import Prefetcher

    return Prefetcher(iter(loader), device)
