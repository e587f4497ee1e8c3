"""Fault-tolerance primitives: preemption, heartbeat and watchdog, NaN/spike decisions, injection.

``rubin.train.faults.policy.FaultPolicy`` wires these to the loop, one call per phase.
"""

from rubin.train.faults import inject
from rubin.train.faults.inject import fault_point
from rubin.train.faults.numerics import NAN_POLICIES, NanDecision, NanGuard, SpikeDetector
from rubin.train.faults.preemption import DEFAULT_SIGNALS, PreemptionHandler, worker_init
from rubin.train.faults.watchdog import Watchdog, stalled_ranks

__all__ = [
    "DEFAULT_SIGNALS",
    "NAN_POLICIES",
    "NanDecision",
    "NanGuard",
    "PreemptionHandler",
    "SpikeDetector",
    "Watchdog",
    "fault_point",
    "inject",
    "stalled_ranks",
    "worker_init",
]
