"""A window of profiled steps, on every rank: torch.profiler's skip, warm-up and active steps.

The window opens after the first checkpoint (so a crash in it loses nothing) and after the steps
that compile (so the trace shows the steady state, not the compiler). Each rank writes
``<run>/profile/rank-N.trace.json`` (Chrome trace: Perfetto, chrome://tracing) and a small
``rank-N.meta.json`` (run id, window, host, the measured cost); on a GPU, optionally a CUDA memory
snapshot for PyTorch's memory viewer. A run that stops inside the window (a preemption, a crash)
still writes the steps it recorded, and says it stopped. With ``profile.enabled=false`` nothing
here runs: the loop calls two no-ops.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import time
import uuid
from pathlib import Path

from rubin.errors import UsageError

DIR = "profile"
COMPILE_STEPS = 2  # a compiled model compiles in step 1 and may recompile in step 2


def window(pcfg, *, ckpt_every: int | None, compile: bool, total_steps: int) -> tuple[int, int, int]:
    """(open, first_active, last) steps. OPEN: the last step before the window; refuses a window past the run."""
    opened = max(ckpt_every if ckpt_every and ckpt_every < total_steps else 0, COMPILE_STEPS if compile else 0)
    first = opened + pcfg.skip + pcfg.warmup + 1
    last = first + pcfg.active - 1
    if last > total_steps:
        raise UsageError(
            f"profile window ends at step {last} (opens after step {opened}: first checkpoint or compile, then skip "
            f"{pcfg.skip} + warmup {pcfg.warmup} + active {pcfg.active}) but the run has {total_steps} steps; "
            "lower profile.skip, profile.warmup or profile.active, or train longer (run.max_steps)")
    return opened, first, last


class Off:
    """Profiling disabled: what the loop calls costs one attribute lookup."""

    def step(self, step: int) -> None:
        pass

    def close(self, status: str = "", step: int | None = None) -> None:
        pass


class ProfileWindow:
    def __init__(self, pcfg, info, run_path, *, run_id: str, bounds: tuple[int, int, int], say=print, event=None):
        self.pcfg, self.info, self.run_id = pcfg, info, run_id
        self.dir = Path(run_path) / DIR
        self.opened, self.first, self.last = bounds
        self.start = self.first - pcfg.warmup  # the profiler starts here (warm-up steps are traced, then dropped)
        self.say, self.event = say, event or (lambda *a, **k: None)
        self.prof, self.recorded, self.done, self._at = None, [], False, None
        self._t, self._times = None, {}  # step wall times inside and just before the window: the stated cost

    def step(self, step: int) -> None:
        """At the top of every loop iteration; STEP: steps done so far (the next one is STEP + 1)."""
        if step == self._at:  # an epoch boundary: the loop came round without a step
            return
        now = time.perf_counter()
        if self._t is not None and self.opened < step <= self.last:
            self._times[step] = now - self._t
        self._t, self._at = now, step
        if self.done:
            return
        if self.prof is None and step + 1 > self.start:  # resumed past the window's start: no partial window
            self.done = True
            if self.info.is_main:
                self.say(f"profile: the run resumed at step {step}, past the window's start "
                         f"(step {self.start}): not profiled")
        elif self.prof is None and step + 1 == self.start:
            self._begin(step + 1)
        elif self.prof is not None:
            self.prof.step()
            if step >= self.last:
                self._end("")

    def close(self, status: str = "", step: int | None = None) -> None:
        """At the end of the loop, STEP steps done: the window ends if STEP is its last step, else it was cut short
        (STATUS: preempted, failed, ...) and what it traced is still written."""
        if self.prof is None or self.done:
            return
        if step is not None and step >= self.last:
            self.step(step)
            return
        if step is not None:
            self._at = step  # the steps done before the stop were traced
        self._end(f"the run {status or 'ended'} inside the window")

    def _begin(self, step: int) -> None:
        from torch.profiler import ProfilerActivity, profile, schedule

        from rubin.platform import device as dev

        self.dir.mkdir(parents=True, exist_ok=True)
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.info.device.type == "cuda" else [])
        plan = schedule(wait=0, warmup=self.pcfg.warmup, active=self.pcfg.active, repeat=1)
        self.prof = profile(activities=acts, schedule=lambda n: plan(max(n - step, 0)), on_trace_ready=self._export,
                            record_shapes=self.pcfg.record_shapes, with_stack=False)
        self.prof.step_num = step  # ProfilerStep#N is the training step N (the schedule counts from the window's start)
        if self.pcfg.memory_snapshot and self.info.device.type == "cuda":
            dev.record_memory_history(True)
        self.prof.start()
        if self.info.is_main:
            self.say(f"profiling steps {self.first}-{self.last} (warm-up from step {step}) into {self.dir}")

    def _export(self, prof) -> None:
        path = self.dir / f"rank-{self.info.rank}.trace.json"
        tmp = path.with_name(f".{path.name}.tmp")
        prof.export_chrome_trace(str(tmp))
        os.replace(tmp, path)

    def _end(self, stopped: str) -> None:
        from rubin.platform import device as dev

        self.done = True
        # the steps finished inside the active part
        self.recorded = list(range(self.first, min(self._at or 0, self.last) + 1))
        try:
            self.prof.stop()  # the trace is written by _export
        finally:
            self.prof = None
            if self.pcfg.memory_snapshot and self.info.device.type == "cuda":
                dev.dump_memory_snapshot(str(self.dir / f"memory-rank-{self.info.rank}.pickle"))
                dev.record_memory_history(False)
        cost = self._cost()
        meta = {"run_id": self.run_id, "rank": self.info.rank, "world_size": self.info.world_size,
                "host": socket.gethostname(),
                "steps": [self.first, self.last], "recorded": self.recorded, "stopped": stopped or None,
                "schedule": {"skip": self.pcfg.skip, "warmup": self.pcfg.warmup, "active": self.pcfg.active,
                             "opened_after": self.opened},
                "device": str(self.info.device), "overhead": cost}
        (self.dir / f"rank-{self.info.rank}.meta.json").write_text(json.dumps(meta, indent=2))
        if self.info.is_main:
            ratio = cost.get("ratio")
            self.say(f"profile: {len(self.recorded)} steps traced in {self.dir}"
                     + (f"; a traced step took {ratio:.2f}x an untraced one" if ratio else "")
                     + (f" (stopped early: {stopped})" if stopped else "")
                     + f"; read it with `rubin profile {self.dir.parent}`")
            self.event("profile", steps=self.recorded, window=[self.first, self.last], stopped=stopped or None,
                       overhead=cost)

    def _cost(self) -> dict:
        """Median wall time of the traced steps against the untraced steps just before the window."""
        base = [t for s, t in self._times.items() if s < self.start]
        traced = [t for s, t in self._times.items() if s in self.recorded]
        out = {"untraced_step_s": statistics.median(base) if base else None,
               "traced_step_s": statistics.median(traced) if traced else None}
        ok = base and traced and out["untraced_step_s"]
        out["ratio"] = out["traced_step_s"] / out["untraced_step_s"] if ok else None
        return out


def check(cfg, total_steps: int) -> None:
    """Refuse a profile window past the run's end before the run dir is touched (exit 2)."""
    if cfg.profile.enabled:
        window(cfg.profile, ckpt_every=cfg.checkpoint.every_steps, compile=cfg.distributed.compile,
               total_steps=total_steps)


def build(cfg, info, run, *, total_steps: int, say=print):
    """The loop's profiler handle for the run dir RUN: ``Off`` unless profile.enabled.
    Rank 0's run id is broadcast to every rank (one collective, at setup)."""
    from rubin.train import distributed

    pcfg = cfg.profile
    if not pcfg.enabled:
        return Off()
    bounds = window(pcfg, ckpt_every=cfg.checkpoint.every_steps, compile=cfg.distributed.compile,
                    total_steps=total_steps)
    run_id = distributed.broadcast_object(info, uuid.uuid4().hex if info.is_main else None)
    return ProfileWindow(pcfg, info, run.path, run_id=run_id, bounds=bounds, say=say, event=run.event)
