"""When and how the loop saves: every N steps or minutes, sync or async, and the emergency save.

It measures each save, so it can say at startup (and again after the first save) whether a full
save fits inside ``checkpoint.preemption_grace_s``.
"""

from __future__ import annotations

import time
from pathlib import Path

from rubin import __version__
from rubin.train import state as st
from rubin.train.checkpoint import AsyncCheckpointer, CheckpointStore


class Saver:
    def __init__(self, cfg, info, run, *, strategy, optimizer, scheduler, precision, env: dict, config_hash: str, barrier):
        self.cfg, self.info, self.run = cfg, info, run
        self.strategy, self.optimizer, self.scheduler, self.precision = strategy, optimizer, scheduler, precision
        self.store = CheckpointStore(
            run.checkpoints,
            keep_last=cfg.checkpoint.keep_last,
            keep_every_steps=cfg.checkpoint.keep_every_steps,
            rank=info.rank,
            world_size=info.world_size,
            barrier=barrier,
            on_event=lambda kind, details: run.event(kind, **details),
        )
        import torch

        self.meta = {
            "rubin_version": __version__,
            "torch_version": torch.__version__,
            "world_size": info.world_size,
            "strategy": strategy.name,
            "config_hash": config_hash,
            "env": env,
        }
        # Async snapshots hold full state dicts; FSDP shards are written by every rank through DCP, synchronously.
        self.use_async = cfg.checkpoint.async_ and strategy.name != "fsdp"
        if cfg.checkpoint.async_ and not self.use_async:
            run.event("warning", message="checkpoint.async is not supported with fsdp yet: saving synchronously")
        self.async_writer = AsyncCheckpointer(
            self.store, on_event=lambda k, d: run.event(k, **d), policy=cfg.checkpoint.async_policy
        ) if self.use_async else None
        self.last_save_s: float | None = None
        self.last_step: int | None = None
        self._last_time = time.monotonic()

    def due(self, step: int) -> bool:
        c = self.cfg.checkpoint
        return bool(c.every_steps and step % c.every_steps == 0)

    def minutes_due(self) -> bool:
        m = self.cfg.checkpoint.every_minutes
        return bool(m and time.monotonic() - self._last_time >= m * 60)

    def save(self, loop: st.LoopState, *, blocking: bool = False) -> float:
        """Save at this step boundary; returns the seconds the loop was stalled."""
        t0 = time.perf_counter()
        step = loop.step
        if self.async_writer is not None and not blocking:
            live = st.live_state(self.strategy, self.optimizer, self.scheduler, self.precision, loop, self.info.rank)
            rank = self.info.rank
            self.async_writer.save(step, live, lambda snap, tmp: st.write_snapshot(snap, tmp, rank), dict(self.meta, step=step))
        else:
            if self.async_writer is not None:
                self.async_writer.wait()
            tmp = self.store.begin(step)
            try:
                if self.strategy.name == "fsdp":
                    st.write_sharded(self.strategy, self.optimizer, self.scheduler, self.precision, loop, tmp, self.info.rank)
                else:
                    live = st.live_state(self.strategy, self.optimizer, self.scheduler, self.precision, loop, self.info.rank)
                    st.write_snapshot(live, tmp, self.info.rank)
            except BaseException:
                self.store.abort(tmp)
                raise
            self.store.commit(step, tmp, dict(self.meta, step=step))
            self.last_save_s = time.perf_counter() - t0
        self.last_step = step
        self._last_time = time.monotonic()
        return time.perf_counter() - t0

    def check_grace(self, say=print) -> str | None:
        """Say so (event + log line), from the measured save time, if an emergency save cannot fit in the grace period.

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
        say(f"warning: {msg}")
        return msg

    def latest(self) -> tuple[int, Path] | None:
        return self.store.latest_valid()

    def finish(self) -> None:
        if self.async_writer is not None:
            self.async_writer.wait()
