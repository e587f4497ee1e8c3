"""The loop's fault hooks: preemption, heartbeat and hang watchdog, NaN policy, spikes, injection.

The primitives live next to this module; ``FaultHooks`` wires them to the loop at named
points, so the loop itself never branches on a fault feature.

Reading a step's loss or grad norm on the host makes the host wait for the device, so a step
only *records* them (device tensors, no sync). ``check`` reads everything recorded since the
last check at once, and agrees across ranks in one small all-reduce, returning ``StepFlags``.
The loop checks at every log, save and eval step, at the last step, about once a second
(``CHECK_EVERY_S``, counted in steps from the measured step time, agreed across ranks), and
before every update under ``nan_policy=skip``, which must know before ``optimizer.step()``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from rubin.train import faults

# How often, at most, the loop reads its flags when nothing else makes it sync. A preemption is
# seen within about this long (plus one step); the cost is one pipeline drain per interval.
CHECK_EVERY_S = 1.0
_NONE = -(2**62)  # "no bad step" in the MAX all-reduce of negated step numbers


@dataclass(frozen=True)
class StepFlags:
    """What every rank agreed on at a check."""

    bad_step: int | None = None  # the first step since the last check with a non-finite loss or grad norm (or a spike), on any rank
    stop: bool = False  # some rank got a preemption signal
    save: bool = False  # a timed checkpoint is due (rank 0's clock)
    loss: float | None = None  # this rank's loss and grad norm at bad_step, for the event
    grad_norm: float | None = None
    position: list | None = None  # [epoch, sample_in_epoch] where bad_step's batches were drawn


class FaultHooks:
    def __init__(self, cfg, info, run, *, fp16: bool, preempt=None):
        self.cfg, self.info, self.run, self.fp16 = cfg, info, run, fp16
        self.preempt = preempt or faults.PreemptionHandler()  # train() installs it before setup
        self.heartbeat = faults.Heartbeat(run.path, info.rank)
        self.watchdog = None
        if cfg.faults.hang_timeout_s:
            self.watchdog = faults.Watchdog(
                self.heartbeat, cfg.faults.hang_timeout_s, run.path, info.rank, info.world_size,
                on_hang=lambda details: run.event("hang", **details),
                # A save or an evaluation may rightly outlast one step's budget; a stuck one is still caught.
                phase_timeouts={p: max(10 * cfg.faults.hang_timeout_s, 600.0) for p in ("checkpoint", "eval")},
            )
        f = cfg.faults
        self.spikes = faults.SpikeDetector(f.spike_factor, f.spike_window) if f.spike_factor else None
        self.nan_guard = faults.NanGuard(f.nan_policy, f.max_rollbacks)
        self.check_before_update = f.nan_policy == "skip"
        self._nan_fired: set[int] = set()
        self._pending: list[tuple[int, list, torch.Tensor, torch.Tensor]] = []
        self._next_check = 0  # the first step is always checked
        self._last_check = (0, time.monotonic())
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
        if phase != "checkpoint":  # the store has its own checkpoint/manifest/commit points
            faults.fault_point(phase, step, self.info.rank)

    def point(self, name: str, step: int) -> None:
        faults.fault_point(name, step, self.info.rank)

    def corrupt_loss(self, loss: torch.Tensor, step: int) -> torch.Tensor:
        # An injected NaN models bad data: it fires the first time the loop reaches the step, so
        # a rollback that skips the offending window gets past it, as it would in a real run.
        if step not in self._nan_fired and faults.fault_point("nan", step, self.info.rank):
            self._nan_fired.add(step)
            return loss * float("nan")
        return loss

    # -- flags -------------------------------------------------------------------------------
    def record(self, step: int, position: list, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        """Keep this step's loss and grad norm (detached device tensors) for the next check; no host sync."""
        self._pending.append((step, position, loss, grad_norm))

    def rewind(self, step: int) -> None:
        """After a rollback to STEP: nothing recorded is pending, and the next step is checked (every rank alike)."""
        self._pending = []
        self._last_check, self._next_check = (step, time.monotonic()), step + 1

    def check_due(self, step: int) -> bool:
        """Whether the loop must read its flags after STEP (the same answer on every rank), on top of its log/save/eval steps."""
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
                nonfinite = not math.isfinite(lv) or (not self.fp16 and not math.isfinite(gv))  # fp16 overflow: the scaler's job
                if not nonfinite and self.spikes is not None and self.spikes.update(lv):
                    self.run.event("warning", message=f"loss spike: {lv:.4g} above {self.spikes.factor}x its running median", step=s)
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
