"""The one object the loop talks to about checkpoints: when to save, what goes in, and resume.

    ckpt = Checkpointer(cfg, info, run, state, env=..., console=..., heartbeat=...)
    ckpt.restore_latest()            # at start (resume) and on a rollback
    ckpt.maybe_save(step, force=...) # at a step boundary whose flags were read; decides on steps itself
    ckpt.wait()                      # an async save in flight has landed (or raised)

A save runs straight down: ``maybe_save`` -> ``store.saving(step)`` (begin) -> ``Strategy.save_state``
and this module's files -> ``store.commit`` -> ``manifest.build`` (the one place that writes the
metadata). An async save hands the same writers to ``AsyncCheckpointer``'s thread.

Layout of one step folder (the commit protocol, manifest and retention live in the modules next to
this one; the model and optimizer files come from ``Strategy.save_state``):

```
step-00000100/
  model.pt, optim.pt      single / DDP: full state dicts (rank 0)
  dcp/                    FSDP: torch.distributed.checkpoint shards, one file per rank
  trainer.pt              scheduler, scaler, loop position (rank 0)
  rng-rank-N.pt           RNG states of rank N: python, numpy, torch CPU, every CUDA device
  MANIFEST.json, COMMITTED
```

Everything is loaded with ``weights_only`` semantics, so RNG states are stored as plain
tensors and lists, never as pickled numpy objects.
"""

from __future__ import annotations

import functools
import random
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rubin.errors import RubinError
from rubin.platform import device as dev
from rubin.train import distributed
from rubin.train.checkpoint.background import AsyncCheckpointer
from rubin.train.checkpoint.manifest import read as read_manifest
from rubin.train.checkpoint.manifest import save_file
from rubin.train.checkpoint.safe_load import load_file
from rubin.train.checkpoint.store import CheckpointStore
from rubin.train.data import plan_batches


@dataclass
class LoopState:
    step: int = 0  # optimizer steps done
    epoch: int = 0
    sample_in_epoch: int = 0  # global samples consumed in this epoch: the sampler position
    micro_step: int = 0  # always 0: checkpoints are taken at optimizer-step boundaries only
    samples_seen: int = 0
    tokens_seen: int = 0
    rollbacks: int = 0
    nan_skips: int = 0
    data_skips: list = field(default_factory=list)  # [epoch, sample_in_epoch] of steps skipped after a rollback

    def advance(self, step: int, samples: int, tokens: int) -> None:
        """STEP is done: it consumed SAMPLES global samples (TOKENS tokens)."""
        self.step = step
        self.sample_in_epoch += samples
        self.samples_seen += samples
        self.tokens_seen += tokens

    @classmethod
    def from_dict(cls, d: dict) -> "LoopState":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})  # older checkpoints carry a dropped train_seconds


@dataclass
class TrainState:
    """Everything a checkpoint restores: the live training objects and the loop position."""

    strategy: Any
    optimizer: Any
    scheduler: Any
    precision: Any
    loop: LoopState = field(default_factory=LoopState)
    # Other loop objects with state_dict/load_state_dict, saved in trainer.pt under their names
    # (the spike detector's running median); a checkpoint without one leaves it as it is.
    extras: dict = field(default_factory=dict)

    def trainer_dict(self) -> dict:
        return {"scheduler": self.scheduler.state_dict(), "precision": self.precision.state_dict(),
                "loop": asdict(self.loop),
                **{name: obj.state_dict() for name, obj in self.extras.items()}}


def capture_rng() -> dict:
    py = random.getstate()
    np_state = np.random.get_state()
    return {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), int(np_state[2]), int(np_state[3]),
                  float(np_state[4])],
        "torch": torch.get_rng_state(),
        "cuda": dev.cuda_rng_states(),
    }


def restore_rng(state: dict) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state((n[0], n[1].numpy().astype(np.uint32), n[2], n[3], n[4]))
    torch.set_rng_state(state["torch"])
    dev.set_cuda_rng_states(state.get("cuda") or [])


def reseed(seed: int, rank: int, step: int = 0) -> None:
    s = (seed * 7919 + rank * 104729 + step) % (2**31)
    random.seed(s)
    np.random.seed(s)
    dev.manual_seed_all(s)


def _alone() -> None:
    """The barrier of a single process: nobody to wait for."""


class Checkpointer:
    def __init__(self, cfg, info, run, state: TrainState, *, env: dict, console, heartbeat):
        """CONSOLE shows what a person must know (a resume, a skipped checkpoint); HEARTBEAT is told
        when a save begins, so the hang watchdog gives the save its own, longer limit."""
        self.cfg, self.info, self.run, self.state = cfg, info, run, state
        self.console, self.say, self.heartbeat = console, console.print, heartbeat
        barrier = functools.partial(distributed.barrier, info) if info.world_size > 1 else _alone
        self.store = CheckpointStore(
            run.checkpoints, keep_last=cfg.checkpoint.keep_last, keep_every_steps=cfg.checkpoint.keep_every_steps,
            rank=info.rank, world_size=info.world_size, barrier=barrier, on_event=self._event,
        )
        self.meta = {"strategy": state.strategy.name, "config_hash": cfg.hash(), "env": env}  # versions: manifest.build
        self.async_writer = AsyncCheckpointer(
            self.store, on_event=self._event, policy=cfg.checkpoint.async_policy,
            group_timeout_s=cfg.distributed.timeout_s,
        ) if cfg.checkpoint.async_ else None
        self.last_save_s: float | None = None  # the last synchronous save, for the grace-period check
        self.last_step: int | None = None
        self._last_time = time.monotonic()
        self._grace_checked = self.check_grace() is not None  # from an earlier attempt's saves

    def _event(self, kind: str, details: dict) -> None:
        self.run.event(kind, **details)

    # -- when ------------------------------------------------------------------------------
    def due(self, step: int) -> bool:
        """A save by step count is due at STEP (the same answer on every rank)."""
        every = self.cfg.checkpoint.every_steps
        return bool(every and step % every == 0)

    def minutes_due(self) -> bool:
        """This rank's clock says a timed save is due; the loop agrees on rank 0's answer before passing ``force``."""
        m = self.cfg.checkpoint.every_minutes
        return bool(m and self.info.is_main and time.monotonic() - self._last_time >= m * 60)

    def maybe_save(self, step: int, *, force: bool = False, emergency: bool = False) -> float:
        """Save at this step boundary if due, forced or an emergency (always synchronous); returns the
        seconds the loop stalled."""
        if not (force or emergency or self.due(step)) or self.last_step == step:
            return 0.0
        self.heartbeat.beat(step, "checkpoint")
        t0 = time.perf_counter()
        meta = dict(self.meta, step=step)
        if self.async_writer is not None and not emergency:
            live = {"rng": capture_rng()}
            if self.info.rank == 0:
                live["trainer"] = self.state.trainer_dict()
            model_optim = self.state.strategy.state_dicts(self.state.optimizer)
            if self.state.strategy.can_snapshot:
                self.async_writer.save(step, {**live, **model_optim}, self._write, meta)
            else:  # sharded (FSDP): DCP stages the shards and writes them in its own thread
                self.async_writer.save_sharded(step, model_optim, live, self._write_rest, meta)
        else:
            self.wait()
            with self.store.saving(step, meta) as tmp:
                self._write(None, tmp)
            self.last_save_s = time.perf_counter() - t0
        self.last_step, self._last_time = step, time.monotonic()
        if self.last_save_s is not None and not self._grace_checked:
            self._grace_checked = True
            self.check_grace()
        return time.perf_counter() - t0

    def _write(self, snap: dict | None, tmp: Path) -> None:
        """The files of one checkpoint; SNAP is a CPU snapshot (async) or None for the live state."""
        st = self.state
        model_optim = None if snap is None else {k: v for k, v in snap.items() if k in ("model", "optim")}
        st.strategy.save_state(st.optimizer, tmp, model_optim)
        self._write_rest(snap, tmp)

    def _write_rest(self, snap: dict | None, tmp: Path) -> None:
        """trainer.pt (rank 0) and this rank's RNG file; SNAP as in ``_write``."""
        if self.info.rank == 0:
            save_file(self.state.trainer_dict() if snap is None else snap["trainer"], tmp / "trainer.pt")
        save_file(capture_rng() if snap is None else snap["rng"], tmp / f"rng-rank-{self.info.rank}.pt")

    def wait(self) -> None:
        """Until the async save in flight (if any) has committed; re-raises its error."""
        if self.async_writer is not None:
            self.async_writer.wait()

    def settle(self) -> None:
        """After a failure: let a save already in flight commit before the process exits (its writer
        is a daemon thread that exit would cut off). One rank only: with peers, the commit waits for
        theirs, which may be gone, and an elastic restart resumes from the last committed one anyway."""
        writer = self.async_writer
        step = writer.inflight_step if writer is not None and self.info.world_size == 1 else None
        if step is None:
            return
        self.console.notice(f"rubin: waiting for the checkpoint of step {step} to commit before exiting")
        try:
            writer.wait()
        except Exception as err:  # noqa: BLE001 - the failure being reported comes first
            self.console.notice(f"rubin: warning: that checkpoint did not commit: {err}")

    # -- restore ---------------------------------------------------------------------------
    def restore_latest(self, *, announce: bool = True, force: bool = False) -> int | None:
        """Load the newest checkpoint that verifies and loads into the live state; returns its step, or None.

        Each one skipped on the way is an event and a console line, and is moved aside. At a resume
        (ANNOUNCE) where checkpoints exist but none is usable, starting over is refused unless FORCE.
        """
        self.wait()  # an async save in flight must land before we choose what to load
        found = self.store.restore(self._load, force=force or not announce, say=self.say)
        if found is None:
            return None
        step, path, _ = found
        st = self.state
        rng_file = path / f"rng-rank-{self.info.rank}.pt"
        if rng_file.exists():
            restore_rng(load_file(rng_file))
        else:  # a rank that did not exist when this was saved (world size grew): a fresh, reproducible stream
            reseed(self.cfg.run.seed, self.info.rank, st.loop.step)
        self.last_step = step
        self.run.event("checkpoint_loaded", step=step, path=str(path))
        if announce:
            self.run.event("resume", step=step, epoch=st.loop.epoch, sample_in_epoch=st.loop.sample_in_epoch)
            self.say(f"resuming from step {step} (checkpoint {path}), verified")
            self._world_changed(path, step)
        return step

    def _world_changed(self, path: Path, step: int) -> None:
        """Say so when the job resumes at another world size (a node lost under nodes MIN:MAX, or added):
        what stays the same is what makes it safe (the data plan refused it already where it is not)."""
        saved = (read_manifest(path) or {}).get("world_size")
        now = self.info.world_size
        if not isinstance(saved, int) or saved == now:
            return
        p = plan_batches(self.cfg.data.batch_size, self.cfg.data.micro_batch_size, now)
        line = (f"world size {saved} -> {now} at step {step}: global batch {p.global_batch} kept as {now} rank(s) x {p.accum_steps} "
                f"micro-batch(es) x {p.micro_batch}; the same samples each step, the same learning rate")
        self.run.event("world_size_changed", step=step, saved=saved, now=now, global_batch=p.global_batch,
                       accum_steps=p.accum_steps, micro_batch=p.micro_batch)
        self.say(line)

    def roll_back(self, bad_step: int, window: list) -> int:
        """nan_policy=rollback: load the newest checkpoint and mark the data WINDOW of BAD_STEP to be skipped."""
        skips = self.state.loop.data_skips + [window]
        rollbacks = self.state.loop.rollbacks + 1
        to_step = self.restore_latest(announce=False)
        if to_step is None:
            raise RubinError(f"nan_policy=rollback at step {bad_step}, but no committed checkpoint exists to "
                             "roll back to; set checkpoint.every_steps or use nan_policy=skip")
        self.state.loop.data_skips = skips  # restore_latest replaced the loop state: carry these over
        self.state.loop.rollbacks = rollbacks
        self.run.event("rollback", step=bad_step, to_step=to_step, skipped_window=window, rollbacks=rollbacks)
        return to_step

    def _load(self, path: Path) -> None:
        """Model, optimizer, scheduler, scaler and loop position from PATH; any error means "invalid, fall back"."""
        st = self.state
        st.strategy.load_state(st.optimizer, path)
        trainer = load_file(path / "trainer.pt")
        st.scheduler.load_state_dict(trainer["scheduler"])
        st.precision.load_state_dict(trainer["precision"])
        st.loop = LoopState.from_dict(trainer["loop"])
        for name, obj in st.extras.items():
            if name in trainer:
                obj.load_state_dict(trainer[name])

    def committed(self, step: int) -> bool:
        """The checkpoint of STEP is committed (its folder renamed into place)."""
        return self.store.is_committed(step)

    def has_checkpoint(self) -> bool:
        return bool(self.store.committed())

    def latest(self) -> tuple[int, Path] | None:
        return self.store.latest_valid()

    def check_grace(self) -> str | None:
        """Say so (event + console line), from the measured save time, if an emergency save cannot fit
        in the grace period.

        The time is this run's last synchronous save, or at startup the newest save recorded in
        events.jsonl by an earlier attempt of the same run.
        """
        grace = self.cfg.checkpoint.preemption_grace_s
        seconds = self.last_save_s
        if seconds is None:
            saved = [e for e in self.run.events() if e.get("kind") == "checkpoint_saved" and e.get("seconds")]
            seconds = saved[-1]["seconds"] if saved else None
        if seconds is None or seconds <= grace:
            return None
        msg = (
            f"a full checkpoint took {seconds:.1f} s, more than checkpoint.preemption_grace_s={grace:g} s: "
            "an emergency save on preemption may not finish; checkpoint more often or use a faster disk"
        )
        self.run.event("warning", message=msg, save_s=seconds, grace_s=grace)
        self.say(f"warning: {msg}")
        return msg
