"""The loop's one handle on faults: preemption, heartbeat and hang watchdog, NaN policy, spikes, injection.

The primitives live next to this module; ``FaultPolicy`` wires them to the loop, which calls it
once per phase and never branches on a fault feature:

    with faults.phase(step, "forward", micro=m):   # heartbeat + the named injection points
    faults.allows_update(step, loop, loss, norm)   # record the step; under nan_policy=skip, decide now
    faults.flags_after(step, due=...)              # at a check point: the StepFlags every rank agreed on

Reading a step's loss or grad norm on the host makes the host wait for the device, so a step
only *records* them (device tensors, no sync). ``check`` reads everything recorded since the
last check at once, and agrees across ranks in one small all-reduce, returning ``StepFlags``.
The loop checks at every log, save and eval step, at the last step, about once a second
(``CHECK_EVERY_S``, counted in steps from the measured step time, agreed across ranks), and
before every update under ``nan_policy=skip``, which must know before ``optimizer.step()``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from rubin.train import faults
from rubin.train.faults.watchdog import heartbeat_path

# How often, at most, the loop reads its flags when nothing else makes it sync. A preemption is
# seen within about this long (plus one step); the cost is one pipeline drain per interval.
CHECK_EVERY_S = 1.0
_NONE = -(2**62)  # "no bad step" in the MAX all-reduce of negated step numbers


@dataclass(frozen=True)
class StepFlags:
    """What every rank agreed on at a check."""

    # the first step since the last check with a non-finite loss or grad norm (or a spike), on any rank
    bad_step: int | None = None
    stop: bool = False  # some rank got a preemption signal
    save: bool = False  # a timed checkpoint is due (rank 0's clock)
    loss: float | None = None  # this rank's loss and grad norm at bad_step, for the event
    grad_norm: float | None = None
    position: list | None = None  # [epoch, sample_in_epoch] where bad_step's batches were drawn


class Heartbeat:
    """Where this rank is (step and phase, with the times they changed), kept by the loop's thread.

    ``beat`` runs several times per step, so it only updates memory. The watchdog's thread, the one
    reader, writes it to ``heartbeats/rank-N.json`` (``flush``) every poll, also while the loop is
    stuck; without a watchdog no file is written. The file's readers are in ``watchdog.py``.
    """

    def __init__(self, run_dir: str | os.PathLike, rank: int):
        self.rank = rank
        self.path = heartbeat_path(Path(run_dir), rank)
        self.step = -1
        self.phase = "start"
        self.step_changed_at = time.monotonic()  # monotonic: what the local watchdog measures
        self.beat_at = self.step_changed_at  # turned into wall time (comparable across ranks) only when written
        self.phase_changed_at = self.step_changed_at
        self.probe: list | None = None  # [address, port] peers try when their watchdog fires (watchdog._Probe)
        self._lock = threading.Lock()

    def beat(self, step: int, phase: str) -> None:
        now = time.monotonic()
        if step != self.step:
            self.step = step
            self.step_changed_at = now
        if phase != self.phase:
            self.phase_changed_at = now
        self.phase = phase
        self.beat_at = now

    def state(self) -> dict:
        wall = time.time()
        return {"rank": self.rank, "pid": os.getpid(), "step": self.step, "phase": self.phase,
                "beat_time": wall - (time.monotonic() - self.beat_at), "written_time": wall, "probe": self.probe}

    def flush(self) -> None:
        """Rewrite this rank's file atomically (cheap: a few hundred bytes, no fsync)."""
        with self._lock:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                tmp = self.path.with_name(f".{self.path.name}.tmp")
                tmp.write_text(json.dumps(self.state()))
                os.replace(tmp, self.path)
            except OSError:  # a full or vanished run dir must not kill training over a heartbeat
                pass


_IN_PHASE = contextlib.nullcontext()  # a phase's work needs nothing on exit: entering is the beat


class FaultPolicy:
    def __init__(self, cfg, info, run, *, fp16: bool, preempt=None, say: Callable[[str], None] | None = None):
        self.cfg, self.info, self.run, self.fp16 = cfg, info, run, fp16
        self.preempt = preempt or faults.PreemptionHandler()  # train() installs it before setup
        self.heartbeat = Heartbeat(run.path, info.rank)
        self.watchdog = None
        if cfg.faults.hang_timeout_s:
            self.watchdog = faults.Watchdog(
                self.heartbeat, cfg.faults.hang_timeout_s, run.path, info.rank, info.world_size,
                on_hang=lambda details: run.event("hang", **details),
                # A save or an evaluation may rightly outlast one step's budget; a stuck one is still caught.
                phase_timeouts={p: max(10 * cfg.faults.hang_timeout_s, 600.0) for p in ("checkpoint", "eval")},
                say=say, hosts=info.hosts,
            )
        f = cfg.faults
        self.spikes = faults.SpikeDetector(f.spike_factor, f.spike_window) if f.spike_factor else None
        self.nan_guard = faults.NanGuard(f.nan_policy, f.max_rollbacks)
        self.check_before_update = f.nan_policy == "skip"
        self._nan_fired: set[int] = set()
        self._pending: list[tuple[int, list, torch.Tensor, torch.Tensor]] = []
        self._next_check = 0  # the first step is always checked
        self._last_check = (0, time.monotonic())
        self._early: StepFlags | None = None  # read before the update (nan_policy=skip), handed out after the step
        self.reaction_s: float | None = None
        self.stragglers = None
        if info.world_size > 1:
            from rubin.train.observe.stragglers import StragglerRecorder

            self.stragglers = StragglerRecorder(info.rank, info.world_size, event=run.event)

    @property
    def stop_reason(self) -> str:
        name = self.preempt.signal_name
        return f"signal {name}" if name else "a signal to another rank"

    def start(self, step: int) -> None:
        self.preempt.install()
        if self.watchdog is not None:
            self.watchdog.start()
        self._last_check, self._next_check = (step, time.monotonic()), step + 1

    def stop(self) -> None:
        self.preempt.uninstall()
        if self.watchdog is not None:
            self.watchdog.stop()

    def straggler_summary(self) -> dict:
        return self.stragglers.summary() if self.stragglers is not None else {}

    def beat(self, step: int, phase: str) -> None:
        """Entering PHASE of STEP: the heartbeat, and a named fault point ("crash@step=7,phase=backward")."""
        self.heartbeat.beat(step, phase)
        if self.stragglers is not None:
            self.stragglers.beat(phase)
        if faults.inject.ARMED and phase != "checkpoint":  # the store has its own checkpoint/manifest/commit points
            faults.fault_point(phase, step, self.info.rank)

    def phase(self, step: int, name: str, *, micro: int | None = None):
        """``with faults.phase(step, "backward"):``. The first micro-batch's forward also fires the
        step's own points: ``step`` (a new step begins) and ``micro-N`` (inside the accumulation window).
        With RUBIN_FAULT unset (it is for tests only), a phase is its heartbeat and nothing else."""
        if micro is not None and faults.inject.ARMED:
            if micro == 0:
                faults.fault_point("step", step, self.info.rank)
            faults.fault_point(f"micro-{micro}", step, self.info.rank)
        self.beat(step, name)
        return _IN_PHASE

    def objective(self, objective):
        """The loss function the loop calls: OBJECTIVE itself, or, when RUBIN_FAULT asks for a ``nan``
        (test-only), a wrapper that turns the loss at that step into NaN. The hot path pays nothing otherwise."""
        if not any(f.kind == "nan" for f in faults.inject.active()):
            return objective
        fired: set[int] = set()
        heartbeat, rank = self.heartbeat, self.info.rank

        def corrupted(model, x, y):
            loss, step = objective(model, x, y), heartbeat.step
            # An injected NaN models bad data: it fires the first time the loop reaches the step, so
            # a rollback that skips the offending window gets past it, as it would in a real run.
            if step not in fired and faults.fault_point("nan", step, rank):
                fired.add(step)
                return loss * float("nan")
            return loss

        return corrupted

    def allows_update(self, step: int, loop, loss: torch.Tensor, grad_norm: torch.Tensor,
                      save_due: Callable[[], bool]) -> bool:
        """Record STEP's loss and grad norm (no host sync). Under nan_policy=skip, read the flags now
        (one sync per step) and return False for a non-finite step, counted in ``loop.nan_skips``."""
        self.record(step, [loop.epoch, loop.sample_in_epoch], loss, grad_norm)
        if not self.check_before_update:
            return True
        flags = self._early = self.check(step, save_due())
        if flags.bad_step is not None and self.on_nonfinite(flags, loop, have_checkpoint=True) == "skip":
            loop.nan_skips += 1
            return False
        return True

    def flags_after(self, step: int, *, due: bool, save_due: Callable[[], bool]) -> StepFlags | None:
        """The flags of every step up to STEP when the loop must read them now (DUE: a log, save or eval
        step; or the policy's own interval), else None. No host sync when None."""
        early, self._early = self._early, None
        if early is not None:
            return early
        if due or self.check_due(step):
            return self.check(step, save_due())
        return None

    def on_bad_step(self, flags: StepFlags, loop, *, have_checkpoint: bool) -> bool:
        """A non-finite step seen after its update (halt or rollback; skip already acted before it):
        applies the policy and returns True when the loop must roll back."""
        if flags.bad_step is None or self.check_before_update:
            return False
        self.on_nonfinite(flags, loop, have_checkpoint=have_checkpoint)
        return True

    # -- flags -------------------------------------------------------------------------------
    def record(self, step: int, position: list, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        """Keep this step's loss and grad norm (detached device tensors) for the next check; no host sync."""
        self._pending.append((step, position, loss, grad_norm))

    def rewind(self, step: int) -> None:
        """After a rollback to STEP: nothing recorded is pending, and the next step is checked (every rank alike)."""
        self._pending = []
        self._last_check, self._next_check = (step, time.monotonic()), step + 1

    def check_due(self, step: int) -> bool:
        """Whether the loop must read its flags after STEP (the same answer on every rank), on top of its
        log, save and eval steps."""
        if step >= self._next_check:
            return True
        # one rank: a signal needs no agreement, so it is acted on at the end of the step it arrived in
        return self.info.world_size == 1 and self.preempt.requested

    def check(self, step: int, save_due: bool = False) -> StepFlags:
        """Read the flags of every step recorded since the last check: one host sync, one small all-reduce."""
        pending, self._pending = self._pending, []
        bad, loss_v, norm_v, position = None, None, None, None
        if pending:
            losses = torch.stack([loss for _, _, loss, _ in pending]).float()
            norms = torch.stack([norm for _, _, _, norm in pending]).float()
            values = torch.stack([losses, norms], dim=1).tolist()  # three kernels and one host sync, however many steps
            for (s, pos, _, _), (lv, gv) in zip(pending, values):
                # an fp16 overflow (non-finite grad norm) is the scaler's job
                nonfinite = not math.isfinite(lv) or (not self.fp16 and not math.isfinite(gv))
                if not nonfinite and self.spikes is not None and self.spikes.update(lv):
                    message = f"loss spike: {lv:.4g} above {self.spikes.factor}x its running median"
                    self.run.event("warning", message=message, step=s)
                    nonfinite = True
                if nonfinite:
                    bad, loss_v, norm_v, position = s, lv, gv, pos
                    break
        now = time.monotonic()
        done, since = step - self._last_check[0], now - self._last_check[1]
        every = max(1, int(CHECK_EVERY_S * done / since)) if done > 0 and since > 0 else 1
        stop, local_bad = self.preempt.requested, bad
        if self.info.world_size > 1:
            import torch.distributed as dist

            self.beat(step, "collective")
            own = self.stragglers.slots()  # each rank's own step time in its slot: no extra collective
            t = torch.tensor([-bad if bad is not None else _NONE, int(stop), int(save_due), -every, *own],
                             dtype=torch.int64, device=self.info.device if self.info.backend == "nccl" else "cpu")
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            agreed = t.tolist()
            bad = -agreed[0] if agreed[0] != _NONE else None
            stop, save_due, every = agreed[1] > 0, agreed[2] > 0, -agreed[3]  # every: the smallest proposal
            self.stragglers.update(agreed[4:], step)
            if bad is not None and bad != local_bad:  # a peer's step: this rank's values of it, for the event
                for s, pos, loss, norm in pending:
                    if s == bad:
                        loss_v, norm_v, position = float(loss), float(norm), pos
        self._last_check, self._next_check = (step, now), step + every
        if stop and self.reaction_s is None and self.preempt.received_at is not None:
            self.reaction_s = now - self.preempt.received_at  # signal -> agreed stop, on the rank that got it
        return StepFlags(bad_step=bad, stop=stop, save=save_due, loss=loss_v, grad_norm=norm_v, position=position)

    def on_nonfinite(self, flags: StepFlags, loop, *, have_checkpoint: bool) -> str:
        """Apply faults.nan_policy to FLAGS.bad_step: returns 'skip' or 'rollback', or raises to halt."""
        step = flags.bad_step
        decision = self.nan_guard.decide(step, loop.rollbacks, have_checkpoint=have_checkpoint)
        self.run.event("nan", step=step, loss=flags.loss, grad_norm=flags.grad_norm,
                       policy=self.cfg.faults.nan_policy, action=decision.action)
        if decision.action == "halt":
            self.nan_guard.halt(decision)
        return decision.action
