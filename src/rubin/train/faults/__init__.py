"""Fault-tolerance primitives: preemption, heartbeat and watchdog, NaN/spike decisions, injection.

``rubin.train.faults.hooks`` wires these to the loop at named points.
"""

from rubin.train.faults import inject
from rubin.train.faults.heartbeat import PHASES, Heartbeat
from rubin.train.faults.inject import fault_point
from rubin.train.faults.numerics import NAN_POLICIES, NanDecision, NanGuard, SpikeDetector
from rubin.train.faults.preemption import DEFAULT_SIGNALS, PreemptionHandler, worker_init
from rubin.train.faults.watchdog import Watchdog, stalled_ranks

__all__ = [
    "DEFAULT_SIGNALS",
    "Heartbeat",
    "NAN_POLICIES",
    "NanDecision",
    "NanGuard",
    "PHASES",
    "PreemptionHandler",
    "SpikeDetector",
    "Watchdog",
    "fault_point",
    "inject",
    "stalled_ranks",
    "worker_init",
]
