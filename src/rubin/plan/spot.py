"""Checkpoint interval and expected run time under preemption.

- Young (1974): tau = sqrt(2 C M), C the checkpoint write time, M the mean time between failures.
- Daly (2006, FGCS 22:303): tau = sqrt(2 C M) [1 + sqrt(C/2M)/3 + (C/2M)/9] - C for C < 2M, else M;
  expected wall time T_w = M e^{R/M} (e^{(tau+C)/M} - 1) T_s / tau for solve time T_s and restart R
  (exponential failures; failures may also strike during a restart).
- A gang-scheduled job on n nodes, each evicted at rate lambda, is evicted at n lambda.
- When an emergency checkpoint fits in the eviction notice, no work is lost: each eviction costs
  the save plus the restart, and periodic checkpoints are not needed against evictions.
"""

from __future__ import annotations

import math


def young_interval(checkpoint_s: float, mtbf_s: float) -> float:
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def daly_interval(checkpoint_s: float, mtbf_s: float) -> float:
    c, m = checkpoint_s, mtbf_s
    if c >= 2 * m:
        return m
    x = c / (2 * m)
    return math.sqrt(2 * c * m) * (1 + math.sqrt(x) / 3 + x / 9) - c


def segment_time(length_s: float, mtbf_s: float, restart_s: float) -> float:
    """Expected wall time to get ``length_s`` of uninterrupted progress (Daly's per-segment term)."""
    m = mtbf_s
    if (restart_s + length_s) / m > 700:  # beyond float range: the run practically never finishes
        return math.inf
    return m * math.exp(restart_s / m) * math.expm1(length_s / m)


def daly_wall_time(solve_s: float, interval_s: float, checkpoint_s: float, mtbf_s: float, restart_s: float) -> float:
    """Daly's T_w: expected wall time with a checkpoint after every ``interval_s`` of work."""
    return segment_time(interval_s + checkpoint_s, mtbf_s, restart_s) * solve_s / interval_s


def restart_phase_time(mtbf_s: float, restart_s: float) -> float:
    """Expected time to complete one restart of ``restart_s`` when evictions can strike it too."""
    if restart_s / mtbf_s > 700:
        return math.inf
    return mtbf_s * math.expm1(restart_s / mtbf_s)


def emergency_wall_time(solve_s: float, save_s: float, mtbf_s: float, restart_s: float) -> float:
    """Expected wall time when every eviction is caught by an emergency save in the notice window.

    Evictions arrive at 1/M during the solve time only (progress is never lost), so their expected
    number is T_s / M, and each costs the save plus a restart phase.
    """
    return solve_s + solve_s / mtbf_s * (save_s + restart_phase_time(mtbf_s, restart_s))


def lost_work_per_failure(segment_s: float, mtbf_s: float) -> float:
    """Expected progress lost at a failure inside a segment of ``segment_s``: E[t | t < L] for t ~ Exp(M).

    About half the segment when failures are rare ((tau + C)/2 to first order).
    """
    m, length = mtbf_s, segment_s
    if length / m < 1e-6:
        return length / 2
    if length / m > 700:  # failures far more frequent than the segment: about one MTBF is lost
        return m
    return m - length / math.expm1(length / m)


def spot_plan(solve_s: float, *, hazard_per_hour: float, nodes: int, checkpoint_s: float,
              emergency_save_s: float | None, notice_s: float, restart_s: float) -> dict:
    """Expected time on spot for one option: interval, preemptions, lost work, wall time."""
    job_hazard = hazard_per_hour * nodes  # per hour
    mtbf = 3600.0 / job_hazard
    save = checkpoint_s if emergency_save_s is None else emergency_save_s
    fits_notice = save <= notice_s
    young = young_interval(checkpoint_s, mtbf)
    daly = daly_interval(checkpoint_s, mtbf)
    if fits_notice:
        wall = emergency_wall_time(solve_s, save, mtbf, restart_s)
        interval, lost = None, 0.0
        # evictions during the solve, times the restart attempts each one takes (failed ones included)
        preemptions = solve_s / mtbf * (math.exp(restart_s / mtbf) if restart_s / mtbf < 700 else math.inf)
    else:
        interval = daly
        # a run shorter than the interval checkpoints once, at its end
        used = min(daly, solve_s) if solve_s > 0 else daly
        wall = daly_wall_time(solve_s, used, checkpoint_s, mtbf, restart_s)
        lost = lost_work_per_failure(used + checkpoint_s, mtbf)
        preemptions = wall / mtbf  # Daly's estimate of the expected number of failures
    return {
        "job_hazard_per_hour": job_hazard,
        "mtbf_hours": mtbf / 3600.0,
        "emergency_checkpoint_fits": fits_notice,
        "checkpoint_interval_s": interval,
        "young_interval_s": young,
        "daly_interval_s": daly,
        "expected_preemptions": preemptions,
        "lost_work_per_preemption_s": lost,
        "restart_overhead_s": restart_s,
        "expected_compute_hours": wall / 3600.0,
    }
