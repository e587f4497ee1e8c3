"""Fault-tolerance scenarios of ``rubin train``, run as real processes, as a table.

    python benchmarks/faults.py [--trials N] [--quick] [--only TEXT] [--keep] [--dir DIR]

Every scenario starts ``python -m rubin train`` (``torchrun`` with 2 gloo ranks and
OMP_NUM_THREADS=1 for the multi-rank ones) on a small deterministic MLP, injects a fault (a
real SIGKILL or SIGTERM, a damaged checkpoint, RUBIN_FAULT for the rest), re-runs the same
command where a re-run is how a user recovers, and compares the final ``param_digest`` with an
uninterrupted reference run of the same config. Columns:

- recovered: trials that behaved as specified (see each scenario's note)
- steps lost: median of (last step completed before the fault) - (step resumed from)
- time to recover: median seconds from the start of the re-run to its ``resume`` event; for an
  elastic restart from the injected crash to the ``resume`` event; for a rollback from the
  ``nan`` event to the ``rollback`` event; for a stall from the stall to the exit
- digest identical: the final ``param_digest`` equals the reference's ("by design" where the
  scenario changes the training on purpose)

A scenario that fails prints ``FAILED: reason`` in its row and the others still run.
Below the table come the figures: sync save time, async stall, SIGTERM-to-exit time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import faultkit  # noqa: E402 - the one fault harness, shared with the tests
from faultkit import ASYNC_CFG, DAMAGES, FAULT_CFG, GRACE_S, HANG_TIMEOUT_S, RESUME_CFG, Fault, child_env, ckpt, events, metric_steps  # noqa: E402


class Fail(Exception):
    """A scenario did not behave as specified; the message goes into the table."""


def train_cmd(run_dir: Path, cfg, *, nproc: int = 0, max_restarts: int = 0) -> list[str]:
    return faultkit.train_cmd(run_dir, list(cfg), nproc=nproc, max_restarts=max_restarts)


class Child:
    """A process in its own session, its output read line by line with the time each line arrived."""

    def __init__(self, cmd: list[str], fault: str | None = None):
        self.t0 = time.time()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                     env=child_env(fault), start_new_session=True)
        self.lines: list[tuple[float, str]] = []
        self.end: float | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append((time.time(), line.rstrip("\n")))

    def _kill_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # this child's own session: its workers and ranks
        except (ProcessLookupError, PermissionError):
            pass

    def wait(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill_group()
            self.proc.wait()
            self._reader.join(5)
            raise Fail(f"no exit within {timeout:.0f} s (killed); last output: {self.tail()}") from None
        self.end = time.time()
        self._kill_group()  # leftovers (a DataLoader worker, a stalled rank) must not outlive the scenario
        self._reader.join(5)
        return rc

    @property
    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def first(self, needle: str) -> float | None:
        return next((t for t, line in self.lines if needle in line), None)

    def tail(self, n: int = 2) -> str:
        lines = [line.strip() for _, line in self.lines if line.strip()]
        return (" | ".join(lines[-n:]) or "(no output)")[-300:]


def run(cmd: list[str], fault: str | None = None, timeout: float = 240) -> Child:
    child = Child(cmd, fault)
    child.wait(timeout)
    return child


def expect_rc(child: Child, want, what: str) -> None:
    rc = child.proc.returncode
    ok = want(rc) if callable(want) else rc == want
    if not ok:
        raise Fail(f"{what}: exit {rc}, expected {getattr(want, '__name__', want)}; {child.tail()}")


# -- run-dir artefacts ----------------------------------------------------------------------
def summary(run_dir: Path) -> dict:
    s = faultkit.summary(run_dir)
    if s is None:
        raise Fail("no summary.json after the run")
    return s


def last_before_resume(steps: list[int], resumed: int) -> int:
    """The last step completed before the fault, from one metrics.jsonl that both attempts appended to."""
    for i in range(1, len(steps)):
        if steps[i] <= steps[i - 1]:
            return steps[i - 1]
    return resumed  # the attempts' steps join without overlap: nothing was re-done


# -- the bench -----------------------------------------------------------------------------
@dataclass
class Trial:
    recovered: bool = True
    lost: int | None = None
    recover_s: float | None = None
    digest: bool | None = None
    note: str = ""
    resumed_from: int | None = None


@dataclass
class Scenario:
    name: str
    fault: Fault
    quick: bool = True
    digest_by_design: bool = False  # the scenario changes training on purpose (a dropped update)
    trials: list[Trial] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


class Bench:
    def __init__(self, root: Path):
        self.root = root
        self._refs: dict[str, tuple[str | None, str | None]] = {}
        self._crashed: dict[int, tuple[Path, int]] = {}
        self.figures: dict[str, list[float]] = {}
        self._n = 0

    def fresh(self, name: str) -> Path:
        self._n += 1
        return self.root / f"{self._n:03d}-{name}"

    def figure(self, key: str, value: float) -> None:
        self.figures.setdefault(key, []).append(value)

    # references: one uninterrupted run per config, run once and cached
    def ref(self, key: str) -> str:
        if key not in self._refs:
            cfg, nproc = {"resume": (RESUME_CFG, 0), "fault": (FAULT_CFG, 0), "async": (ASYNC_CFG, 0),
                          "fault-2rank": (FAULT_CFG, 2)}[key]
            run_dir = self.fresh(f"ref-{key}")
            try:
                child = run(train_cmd(run_dir, cfg, nproc=nproc))
                expect_rc(child, 0, f"reference run ({key})")
                s = summary(run_dir)
                self._refs[key] = (s["param_digest"], None)
                self._ref_figures(key, run_dir, s)
            except Fail as err:
                self._refs[key] = (None, str(err))
        digest, err = self._refs[key]
        if err:
            raise Fail(err)
        return digest

    def _ref_figures(self, key: str, run_dir: Path, s: dict) -> None:
        saved = events(run_dir, "checkpoint_saved")
        if not saved:
            return
        stall = s.get("time_split", {}).get("ckpt_s")
        if key == "fault":
            self.figures["sync_save_s"] = [e["seconds"] for e in saved]
            self.figures["sync_commit_s"] = [e["commit_seconds"] for e in saved]
            self.figures["ckpt_bytes"] = [saved[-1]["bytes"]]
            if stall is not None:
                self.figures["sync_stall_s"] = [stall / len(saved)]
        elif key == "async":
            self.figures["async_write_s"] = [e["seconds"] for e in saved]
            if stall is not None:
                self.figures["async_stall_s"] = [stall / len(saved)]

    def rerun(self, run_dir: Path, cfg: list[str], steps: int, ref_key: str | None, *, nproc: int = 0,
              last: int | None = None) -> Trial:
        """The same command again: it must resume, complete, and (where given) match the reference.

        LAST: the last step completed before the fault, when metrics.jsonl cannot show it (the
        fault hit between the step and its log line); default: the last step logged.
        """
        last = max(metric_steps(run_dir), default=0) if last is None else last
        child = run(train_cmd(run_dir, cfg, nproc=nproc))
        expect_rc(child, 0, "re-run")
        s = summary(run_dir)
        if s.get("status") != "completed" or s.get("steps") != steps:
            raise Fail(f"re-run ended {s.get('status')} at step {s.get('steps')}, expected completed at {steps}")
        resumed = events(run_dir, "resume", since=child.t0)
        if not resumed:
            raise Fail("re-run did not resume (no resume event): it started over")
        r = resumed[0]
        t = Trial(lost=last - int(r["step"]), recover_s=r["time"] - child.t0, resumed_from=int(r["step"]),
                  note=f"resumed at step {r['step']}")
        if ref_key:
            t.digest = s["param_digest"] == self.ref(ref_key)
        return t

    def crashed_base(self, trial: int, fault: str) -> tuple[Path, int]:
        """One run SIGKILLed at step 8 (checkpoints 3 and 6 on disk), copied for each kind of damage."""
        if trial not in self._crashed:
            run_dir = self.fresh("crashed-at-8")
            child = run(train_cmd(run_dir, FAULT_CFG), fault=fault)
            expect_rc(child, -signal.SIGKILL, "run killed at step 8")
            if not (ckpt(run_dir, 6) / "COMMITTED").is_file():
                raise Fail("no committed checkpoint of step 6 to damage")
            self._crashed[trial] = (run_dir, max(metric_steps(run_dir), default=0))
        return self._crashed[trial]


# -- scenarios: one function per kind of fault in faultkit.SCENARIOS ---------------------------------
def sigkill(b: Bench, trial: int, sc: Fault) -> Trial:
    b.ref("resume")
    run_dir = b.fresh("sigkill")
    child = run(train_cmd(run_dir, sc.cfg), fault=sc.fault)
    expect_rc(child, -signal.SIGKILL, "killed run")
    if (run_dir / "summary.json").exists():
        raise Fail("the killed run wrote a summary: it was not killed mid-run")
    return b.rerun(run_dir, RESUME_CFG, 40, "resume")


def sigterm_external(b: Bench, trial: int, sc: Fault) -> Trial:
    """A real SIGTERM from outside (Popen.send_signal) while a long run trains with a DataLoader worker.

    With NPROC ranks the signal goes to torchrun, which forwards it to its workers (as on a
    preempted node); torchrun itself then exits 1, so only the ranks' own exit is 75.
    """
    nproc = sc.nproc
    run_dir = b.fresh(f"sigterm-ext-{nproc or 1}")
    cfg = FAULT_CFG + ["run.max_steps=100000", "checkpoint.every_steps=1000"]
    child = Child(train_cmd(run_dir, cfg, nproc=nproc))
    deadline = time.time() + 120
    while time.time() < deadline and not (run_dir / "metrics.jsonl").exists() and child.proc.poll() is None:
        time.sleep(0.1)
    if child.proc.poll() is not None or not (run_dir / "metrics.jsonl").exists():
        child.wait(5)
        raise Fail(f"run never started training (exit {child.proc.returncode}); {child.tail()}")
    time.sleep(1.0)
    t_sig = time.time()
    child.proc.send_signal(signal.SIGTERM)
    child.wait(60)
    exit_s = child.end - t_sig
    if nproc:
        expect_rc(child, lambda rc: rc != 0, "torchrun on SIGTERM")
    else:
        expect_rc(child, 75, "SIGTERM")
        for bad in ("Traceback", "DataLoader worker"):
            if bad in child.text:
                raise Fail(f"{bad!r} in the output on SIGTERM: {child.tail()}")
    s = summary(run_dir)
    stop = int(s["steps"])
    if s.get("status") != "preempted" or not (ckpt(run_dir, stop) / "COMMITTED").is_file():
        raise Fail(f"status {s.get('status')}, no committed checkpoint of step {stop}")
    saved = [e for e in events(run_dir, "checkpoint_saved") if e["step"] == stop]
    key = "sigterm_torchrun" if nproc else "sigterm"
    b.figure(f"{key}_exit_s", exit_s)
    if saved:
        b.figure(f"{key}_commit_s", saved[-1]["time"] - t_sig)
    if exit_s > GRACE_S:
        raise Fail(f"exit {exit_s:.1f} s after SIGTERM, over the {GRACE_S:g} s grace period")
    # Re-run the same command (a shorter run.max_steps, a resumable change, so that it ends): resumes at STOP.
    t = b.rerun(run_dir, FAULT_CFG + [f"run.max_steps={stop + 3}", "checkpoint.every_steps=1000"], stop + 3, None, nproc=nproc)
    t.note = f"SIGTERM->exit {exit_s:.2f} s at step {stop}" + (f", torchrun exit {child.proc.returncode}" if nproc else ", exit 75")
    return t


def sigterm_injected(b: Bench, trial: int, sc: Fault) -> Trial:
    run_dir = b.fresh("sigterm-5")
    child = run(train_cmd(run_dir, sc.cfg, nproc=sc.nproc), fault=sc.fault)
    expect_rc(child, (lambda rc: rc != 0) if sc.nproc else 75, f"{sc.fault}")  # torchrun exits 1 when its ranks exit 75
    s = summary(run_dir)
    if s.get("status") != "preempted" or not (ckpt(run_dir, int(s["steps"])) / "COMMITTED").is_file():
        raise Fail(f"status {s.get('status')} at step {s.get('steps')}, no committed emergency checkpoint")
    t = b.rerun(run_dir, FAULT_CFG, 12, "fault-2rank" if sc.nproc else "fault", nproc=sc.nproc)
    t.note = f"every rank stopped at step {s['steps']}"
    return t


def sigterm_latency(b: Bench, trial: int, sc: Fault) -> Trial:
    """Rank 0 alone gets SIGTERM while nothing logs: how long until both ranks agree to stop (``reaction_s``)."""
    run_dir = b.fresh("sigterm-latency")
    child = run(train_cmd(run_dir, sc.cfg, nproc=sc.nproc), fault=sc.fault)
    expect_rc(child, lambda rc: rc != 0, "torchrun, ranks exiting 75")
    s = summary(run_dir)
    stopped = events(run_dir, "preempted")
    if s.get("status") != "preempted" or not stopped or stopped[0].get("reaction_s") is None:
        raise Fail(f"status {s.get('status')}, preempted events {stopped}")
    reaction = float(stopped[0]["reaction_s"])
    b.figure("preempt_reaction_s", reaction)
    b.figure("preempt_steps_late", int(s["steps"]) - 40)
    return Trial(lost=0, recover_s=reaction, note=f"signal at step 40, both ranks stopped at step {s['steps']}")


def sigterm_in_checkpoint(b: Bench, trial: int, sc: Fault) -> Trial:
    run_dir = b.fresh("sigterm-ckpt")
    child = run(train_cmd(run_dir, sc.cfg), fault=sc.fault)
    expect_rc(child, 75, "SIGTERM during the save of step 6")
    for d in (run_dir / "checkpoints").iterdir():
        if d.name.startswith(".tmp") and (d / "COMMITTED").exists():
            raise Fail(f"a committed tmp folder was left: {d.name}")
    check = run([sys.executable, "-m", "rubin", "checkpoint", "verify", str(run_dir)], timeout=60)
    expect_rc(check, 0, "rubin checkpoint verify")
    t = b.rerun(run_dir, FAULT_CFG, 12, "fault")
    t.note = f"stopped at step {t.resumed_from}"
    return t


def damaged(b: Bench, trial: int, sc: Fault) -> Trial:
    base, _ = b.crashed_base(trial, sc.fault)
    run_dir = b.fresh(f"damaged-{sc.arg}")
    shutil.copytree(base, run_dir)
    DAMAGES[sc.arg](ckpt(run_dir, 6))
    t = b.rerun(run_dir, FAULT_CFG, 12, "fault")
    if t.resumed_from != 3:
        raise Fail(f"resumed from step {t.resumed_from}, expected the fallback to step 3")
    bad = events(run_dir, "checkpoint_invalid")
    if sc.arg != "missing-marker":
        if not bad or bad[-1]["step"] != 6:
            raise Fail("no checkpoint_invalid event for the damaged step 6")
        t.note = "detected: " + bad[-1]["reason"].split(";")[0][:70]
    else:
        t.note = "unmarked folder is not a checkpoint"
    return t


def disk_full(b: Bench, trial: int, sc: Fault) -> Trial:
    run_dir = b.fresh("diskfull")
    child = run(train_cmd(run_dir, sc.cfg), fault=sc.fault)
    expect_rc(child, 1, "ENOSPC during the 2nd save")
    if "disk full" not in child.text.lower() or "Traceback" in child.text:
        raise Fail(f"not one clear disk-full error: {child.tail()}")
    if not (ckpt(run_dir, 3) / "COMMITTED").is_file() or ckpt(run_dir, 6).exists():
        raise Fail("the previous checkpoint (step 3) is not intact, or a partial step 6 is there")
    # The 2nd save is the one of step 6: that step was done, then its save failed before the log line.
    t = b.rerun(run_dir, FAULT_CFG, 12, "fault", last=6)
    t.note = "clear error, exit 1, step 3 kept"
    return t


def nan(b: Bench, trial: int, sc: Fault) -> Trial:
    policy = sc.arg
    run_dir = b.fresh(f"nan-{policy}")
    child = run(train_cmd(run_dir, list(sc.cfg) + [f"faults.nan_policy={policy}"]), fault=sc.fault)
    expect_rc(child, 0, f"nan_policy={policy}")
    s = summary(run_dir)
    nans = events(run_dir, "nan")
    if not nans or nans[0]["step"] != 5 or s.get("steps") != 12:
        raise Fail(f"nan events {[e.get('step') for e in nans]}, ended at step {s.get('steps')}")
    t = Trial(digest=s["param_digest"] == b.ref("fault"))
    if policy == "skip":
        if s.get("nan_skips") != 1:
            raise Fail(f"nan_skips={s.get('nan_skips')}, expected 1")
        t.lost, t.note = 0, "1 update dropped, run completes"
    else:
        rb = events(run_dir, "rollback")
        if s.get("rollbacks") != 1 or not rb:
            raise Fail(f"rollbacks={s.get('rollbacks')}, expected 1")
        t.lost = int(rb[0]["step"]) - 1 - int(rb[0]["to_step"])
        t.recover_s = rb[0]["time"] - nans[0]["time"]
        t.note = f"rolled back to step {rb[0]['to_step']}, bad window skipped"
    return t


def elastic(b: Bench, trial: int, sc: Fault) -> Trial:
    b.ref("fault-2rank")
    run_dir = b.fresh("elastic")
    child = run(train_cmd(run_dir, sc.cfg, nproc=sc.nproc, max_restarts=1), fault=sc.fault, timeout=300)
    expect_rc(child, 0, "torchrun --max-restarts 1")
    s = summary(run_dir)
    resumed = events(run_dir, "resume")
    if s.get("status") != "completed" or s.get("restart_count") != 1 or not resumed:
        raise Fail(f"status {s.get('status')}, restart_count {s.get('restart_count')}, resume events {len(resumed)}")
    t_crash = child.first("rubin-fault: crash")
    r = resumed[0]
    t = Trial(lost=last_before_resume(metric_steps(run_dir), int(r["step"])) - int(r["step"]),
              recover_s=(r["time"] - t_crash) if t_crash else None,
              digest=s["param_digest"] == b.ref("fault-2rank"))
    t.note = f"rank 1 SIGKILLed at step 7, restart resumed at {r['step']}"
    return t


def stall(b: Bench, trial: int, sc: Fault) -> Trial:
    run_dir = b.fresh("stall")
    child = run(train_cmd(run_dir, sc.cfg, nproc=sc.nproc), fault=sc.fault, timeout=180)
    expect_rc(child, lambda rc: rc != 0, "non-zero")
    t_stall = child.first("rubin-fault: stall")
    if t_stall is None:
        raise Fail(f"the stall never fired; {child.tail()}")
    took = child.end - t_stall
    if "hang: rank(s) 1 stalled" not in child.text:
        raise Fail(f"the message does not name rank 1: {child.tail()}")
    reports = [run_dir / f"hang-rank-{r}.txt" for r in (0, 1)]
    if not all(p.exists() and "stalled_ranks: [1]" in p.read_text() for p in reports):
        raise Fail("hang-rank-0.txt / hang-rank-1.txt missing or not naming rank 1")
    t = Trial(recovered=took <= HANG_TIMEOUT_S + 10, recover_s=took)
    t.note = f"exit {took:.1f} s after the stall (timeout {HANG_TIMEOUT_S} s), names rank 1"
    if not t.recovered:
        raise Fail(f"exited {took:.1f} s after the stall, over timeout + 10 s")
    return t


def async_kill(b: Bench, trial: int, sc: Fault) -> Trial:
    phase = sc.arg
    b.ref("async")
    run_dir = b.fresh(f"async-{phase}")
    child = run(train_cmd(run_dir, sc.cfg), fault=sc.fault)
    expect_rc(child, -signal.SIGKILL, f"SIGKILL in the background save at {phase}")
    tmp = run_dir / "checkpoints" / ".tmp-step-00000006"
    if ckpt(run_dir, 6).exists() or not tmp.is_dir():
        raise Fail("the kill did not land inside the background save of step 6")
    at = max(metric_steps(run_dir), default=0)
    t = b.rerun(run_dir, ASYNC_CFG, 12, "async")
    if t.resumed_from != 3 or tmp.exists():
        raise Fail(f"resumed from {t.resumed_from}, tmp folder left: {tmp.exists()}")
    what = {"manifest": "manifest written, no marker", "commit": "marker written, not renamed"}.get(phase, phase)
    t.note = f"killed in the background ({what}), loop at step {at}"
    return t


RUNNERS = {"sigkill": sigkill, "sigterm-external": sigterm_external, "sigterm": sigterm_injected, "sigterm-latency": sigterm_latency,
           "sigterm-checkpoint": sigterm_in_checkpoint, "damage": damaged, "diskfull": disk_full, "nan": nan,
           "elastic": elastic, "stall": stall, "async-kill": async_kill}
SCENARIOS = [Scenario(f.name, f, quick=f.quick, digest_by_design=f.digest_by_design) for f in faultkit.SCENARIOS]


# -- output ----------------------------------------------------------------------------------
def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def row(sc: Scenario, n: int) -> list[str]:
    ok = [t for t in sc.trials if t.recovered]
    lost = _median([t.lost for t in ok])
    rec = _median([t.recover_s for t in ok])
    digests = [t.digest for t in sc.trials if t.digest is not None]
    if not digests:
        dig = "n/a"
    else:
        dig = "yes" if all(digests) else "no"
        if sc.digest_by_design and not all(digests):
            dig += " (by design)"
    note = "FAILED: " + sc.failures[0] if sc.failures else (sc.trials[-1].note if sc.trials else "")
    return [sc.name, str(n), str(len(ok)), "n/a" if lost is None else f"{lost:g}",
            "n/a" if rec is None else f"{rec:.2f} s", dig, note]


def table(rows: list[list[str]]) -> str:
    head = ["scenario", "trials", "recovered", "steps lost", "time to recover", "digest identical", "notes"]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    fmt = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([fmt(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(fmt, rows)])


def figures(b: Bench) -> list[str]:
    f, out = b.figures, []
    med = lambda k: statistics.median(f[k]) if f.get(k) else None  # noqa: E731
    if med("sync_save_s") is not None:
        out.append(f"sync checkpoint save (begin -> committed, checkpoint_saved.seconds): median {med('sync_save_s'):.3f} s, "
                   f"max {max(f['sync_save_s']):.3f} s over {len(f['sync_save_s'])} saves of {int(f['ckpt_bytes'][0])} bytes "
                   f"(commit part: median {med('sync_commit_s'):.3f} s)")
    if med("sync_stall_s") is not None and med("async_stall_s") is not None:
        out.append(f"loop stall per save (summary time_split.ckpt_s / saves): sync {med('sync_stall_s'):.3f} s, "
                   f"async {med('async_stall_s'):.3f} s, ratio {med('async_stall_s') / med('sync_stall_s'):.2f} "
                   "(a tiny model: fixed costs dominate; benchmarks/checkpoint_stall.py measures a 52M-parameter one)")
    if med("async_write_s") is not None:
        out.append(f"async save begin -> committed in the background: median {med('async_write_s'):.3f} s")
    if med("sigterm_exit_s") is not None:
        commit = f", SIGTERM -> emergency checkpoint committed median {med('sigterm_commit_s'):.3f} s" if f.get("sigterm_commit_s") else ""
        out.append(f"SIGTERM -> exit 75: median {med('sigterm_exit_s'):.2f} s, max {max(f['sigterm_exit_s']):.2f} s "
                   f"(checkpoint.preemption_grace_s default {GRACE_S:g} s){commit}")
    if f.get("preempt_reaction_s"):
        r = sorted(f["preempt_reaction_s"])
        out.append("signal -> stop agreed by both ranks between log points (preempted.reaction_s): "
                   f"median {med('preempt_reaction_s'):.2f} s, "
                   f"min {r[0]:.2f} s, max {r[-1]:.2f} s, n={len(r)}; steps run after the signal: median {med('preempt_steps_late'):g}")
    if med("sigterm_torchrun_exit_s") is not None:
        out.append(f"SIGTERM to torchrun (2 ranks) -> all ranks stopped: median {med('sigterm_torchrun_exit_s'):.2f} s; "
                   "torchrun itself exits 1, not 75: requeue on summary.json status, or always rerun")
    digests = {k: v[0] for k, v in b._refs.items() if v[0]}
    if "fault" in digests and "async" in digests:
        same = "yes" if digests["fault"] == digests["async"] else "no"
        out.append(f"async and sync reference runs end with the same param_digest: {same}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1, help="trials per scenario (default 1)")
    ap.add_argument("--quick", action="store_true", help="a subset: one of each kind of fault")
    ap.add_argument("--only", action="append", default=[], metavar="TEXT", help="only scenarios whose name contains TEXT (repeatable)")
    ap.add_argument("--dir", help="where the run dirs go (default: a new temporary directory, removed at the end)")
    ap.add_argument("--keep", action="store_true", help="keep the run dirs")
    args = ap.parse_args()
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="rubin-faults-"))
    root.mkdir(parents=True, exist_ok=True)
    chosen = [s for s in SCENARIOS
              if (s.quick or not args.quick) and (not args.only or any(o.lower() in s.name.lower() for o in args.only))]
    b = Bench(root)
    t_all = time.time()
    try:
        for sc in chosen:
            t0 = time.time()
            for trial in range(args.trials):
                try:
                    sc.trials.append(RUNNERS[sc.fault.kind](b, trial, sc.fault))
                except Fail as err:
                    sc.failures.append(str(err))
                except Exception as err:  # noqa: BLE001 - one broken scenario must not stop the table
                    sc.failures.append(f"{type(err).__name__}: {err}"[:300])
            status = f"FAILED: {sc.failures[0]}" if sc.failures else "ok"
            print(f"  {sc.name}: {status} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    print(table([row(sc, args.trials) for sc in chosen]))
    print()
    for line in figures(b):
        print(line)
    print(f"({len(chosen)} scenarios x {args.trials} trials in {time.time() - t_all:.0f} s"
          + (f"; run dirs kept in {root}" if args.keep or args.dir else "") + ")")
    return 1 if any(sc.failures for sc in chosen) else 0


if __name__ == "__main__":
    sys.exit(main())
