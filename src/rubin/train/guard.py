"""The loop's fault hooks: preemption, heartbeat and hang watchdog, NaN policy, spikes, injection.

The primitives live in ``rubin.train.faults``; this class wires them to the loop at named
points, so the loop itself never branches on a fault feature.
"""

from __future__ import annotations

import math

import torch

from rubin.train import faults


class FaultHooks:
    def __init__(self, cfg, info, run):
        self.cfg, self.info, self.run = cfg, info, run
        self.preempt = faults.PreemptionHandler()
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
        self._nan_fired: set[int] = set()

    @property
    def signal_name(self) -> str | None:
        return self.preempt.signal_name

    def start(self) -> None:
        self.preempt.install()
        if self.watchdog is not None:
            self.watchdog.start()

    def stop(self) -> None:
        self.preempt.uninstall()
        if self.watchdog is not None:
            self.watchdog.stop()

    def beat(self, step: int, phase: str) -> None:
        """Entering PHASE of STEP: the heartbeat, and a named fault point ("crash@step=7,phase=backward")."""
        self.heartbeat.beat(step, phase)
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

    def agree(self, loss: torch.Tensor, grad_norm: torch.Tensor, fp16: bool, minutes_due: bool) -> tuple[bool, bool, bool]:
        """One small all-reduce per step: every rank takes the same NaN, stop and save decisions.

        Under fp16 a non-finite grad norm is an overflow the scaler skips (counted, not a NaN);
        a non-finite loss is always a NaN.
        """
        loss_v = float(loss.detach().float().item())
        bad = not math.isfinite(loss_v) or (not fp16 and not math.isfinite(float(grad_norm)))
        if not bad and self.spikes is not None and self.spikes.update(loss_v):
            self.run.event("warning", message=f"loss spike: {loss_v:.4g} above {self.spikes.factor}x its running median")
            bad = True
        flags = [float(bad), float(self.preempt.requested), float(minutes_due and self.info.is_main)]
        if self.info.world_size > 1:
            import torch.distributed as dist

            t = torch.tensor(flags, device=self.info.device if self.info.backend == "nccl" else "cpu")
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            flags = t.tolist()
        return flags[0] > 0, flags[1] > 0, flags[2] > 0

    def on_nonfinite(self, step: int, loss, grad_norm, loop, *, have_checkpoint: bool) -> str:
        """Apply faults.nan_policy: returns 'skip' or 'rollback', or raises to halt."""
        decision = self.nan_guard.decide(step, loop.rollbacks, have_checkpoint=have_checkpoint)
        self.run.event("nan", step=step, loss=float(loss), grad_norm=float(grad_norm),
                       policy=self.cfg.faults.nan_policy, action=decision.action)
        if decision.action == "halt":
            self.nan_guard.halt(decision)
        return decision.action
