"""NaN and loss-spike decisions: what a non-finite step leads to, and what counts as a spike.

The verdicts themselves are agreed across ranks by ``FaultPolicy.check`` (``faults/policy.py``),
so one rank seeing a NaN makes every rank skip (or roll back) the same step; otherwise one rank
would step while another did not, and the replicas would silently diverge.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from statistics import median

from rubin.errors import RubinError, bad_value

NAN_POLICIES = ("halt", "skip", "rollback")


@dataclass(frozen=True)
class NanDecision:
    action: str  # "skip" | "rollback" | "halt"
    message: str


class NanGuard:
    """Turns a non-finite step into the configured action, counting rollbacks."""

    def __init__(self, policy: str = "halt", max_rollbacks: int = 3):
        if policy not in NAN_POLICIES:
            raise bad_value("faults.nan_policy", policy, f"one of {', '.join(NAN_POLICIES)}")
        self.policy, self.max_rollbacks = policy, max_rollbacks

    def decide(self, step: int, rollbacks_done: int = 0, *, have_checkpoint: bool = True) -> NanDecision:
        if self.policy == "skip":
            return NanDecision("skip", f"non-finite loss or gradient norm at step {step}: update skipped")
        if self.policy == "rollback":
            if rollbacks_done >= self.max_rollbacks:
                return NanDecision("halt", f"non-finite loss at step {step} after {rollbacks_done} rollbacks "
                                   f"(faults.max_rollbacks={self.max_rollbacks}): halting; the last good checkpoint is kept")
            if not have_checkpoint:
                return NanDecision("halt", f"faults.nan_policy=rollback at step {step}, but no committed checkpoint exists; "
                                   "set checkpoint.every_steps or use faults.nan_policy=skip")
            return NanDecision("rollback", f"non-finite loss at step {step}: rolling back to the last good checkpoint")
        return NanDecision("halt", f"non-finite loss or gradient norm at step {step} (faults.nan_policy=halt); "
                           "lower optim.lr, check the data, or set faults.nan_policy=skip|rollback")

    def halt(self, decision: NanDecision) -> None:
        raise RubinError(decision.message)


class SpikeDetector:
    """A loss above ``factor`` x the running median of the last ``window`` accepted losses."""

    def __init__(self, factor: float, window: int = 50, *, min_history: int = 10):
        if not factor > 1:
            raise bad_value("faults.spike_factor", factor, "a number > 1")
        if window < 2:
            raise bad_value("faults.spike_window", window, "an integer >= 2")
        self.factor, self.window = float(factor), int(window)
        self.min_history = min(min_history, window)
        self.history: deque[float] = deque(maxlen=window)

    def update(self, loss: float) -> bool:
        """True when LOSS is a spike; spikes stay out of the history so they cannot raise the median."""
        loss = float(loss)
        if len(self.history) >= self.min_history:
            med = median(self.history)
            if med > 0 and loss > self.factor * med:
                return True
        if math.isfinite(loss):
            self.history.append(loss)
        return False

    def state_dict(self) -> dict:
        return {"history": list(self.history)}

    def load_state_dict(self, state: dict) -> None:
        self.history = deque(state.get("history", []), maxlen=self.window)
