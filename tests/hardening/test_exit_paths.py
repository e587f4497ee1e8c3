"""Issue 16 items 10-12: SIGHUP is a preemption, late signals never change exit 75, and DataLoader workers
(which ignore SIGTERM) never keep a process from exiting, on any exit path."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hardkit import ROOT, events, mlp_args, rubin, summary

TAIL_S = 15.0  # from the last line a process prints to its exit; a hang is forever, a clean exit well under this


class Watched:
    """A real ``rubin`` process in its own session, its output lines timestamped as they arrive."""

    def __init__(self, cmd, env=None):
        full = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full,
                                  start_new_session=True, cwd=ROOT)
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append((time.monotonic(), line))

    def wait(self, timeout: float = 300) -> tuple[int, float]:
        """(exit code, seconds from the last output line to the exit)."""
        try:
            code = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()
            raise AssertionError(f"process did not exit within {timeout} s:\n{self.text()[-3000:]}") from None
        ended = time.monotonic()
        self._reader.join(timeout=30)
        return code, ended - (self.lines[-1][0] if self.lines else ended)

    def text(self) -> str:
        return "".join(line for _, line in self.lines)

    def group_alive(self) -> list[int]:
        """PIDs still in the process's group (its DataLoader workers, if they outlived it)."""
        out = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[2]) == self.p.pid and fields[0] != "Z":
                    out.append(int(d.name))
        return out


def _wait_for_step(run, step: int, proc: Watched, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        metrics = run / "metrics.jsonl"
        if metrics.exists() and any(json.loads(l).get("step", 0) >= step for l in metrics.read_text().splitlines() if l.endswith("}")):
            return
        if proc.p.poll() is not None:
            raise AssertionError(f"exited early ({proc.p.returncode}):\n{proc.text()[-3000:]}")
        time.sleep(0.05)
    raise AssertionError(f"step {step} not reached in {timeout} s")


def _train(run, steps, *sets, env=None) -> Watched:
    return Watched([sys.executable, "-m", "rubin", "train", *mlp_args(run, steps, *sets)], env=env)


WORKERS = ("data.num_workers=2", "data.persistent_workers=true")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process groups from /proc (Linux)")
@pytest.mark.parametrize("path", ["completed", "preempted", "error", "nan_halt"])
def test_live_workers_never_hold_the_exit(tmp_path, path):
    run = tmp_path / "run"
    if path == "completed":
        w = _train(run, 6, *WORKERS)
        expect = 0
    elif path == "preempted":
        w = _train(run, 5000, *WORKERS, "checkpoint.every_steps=1000")
        _wait_for_step(run, 3, w)
        os.killpg(w.p.pid, signal.SIGTERM)  # the whole group, workers included, as a scheduler does
        expect = 75
    elif path == "error":
        w = _train(run, 12, *WORKERS, env={"RUBIN_FAULT": "diskfull@save=1"})
        expect = 1
    else:
        w = _train(run, 12, *WORKERS, "faults.nan_policy=halt", env={"RUBIN_FAULT": "nan@step=3"})
        expect = 1
    code, tail = w.wait()
    assert code == expect, w.text()[-3000:]
    assert tail < TAIL_S, f"{tail:.1f} s between the last line and the exit"
    assert w.group_alive() == [], "a DataLoader worker outlived its trainer"


def test_unclosed_worker_iterator_does_not_hang_the_interpreter_exit(tmp_path):
    """The issue's hang: a persistent worker that ignores SIGTERM, its iterator never closed, at interpreter exit."""
    script = tmp_path / "leave_workers.py"
    script.write_text(
        "from torch.utils.data import DataLoader\n"
        "from rubin.train import faults\n"
        "loader = DataLoader(list(range(64)), batch_size=4, num_workers=2, worker_init_fn=faults.worker_init,\n"
        "                    persistent_workers=True)\n"
        "IT = iter(loader)\n"
        "next(IT)\n"
        "print('done', flush=True)\n"
    )
    w = Watched([sys.executable, str(script)])
    code, tail = w.wait(timeout=240)
    assert code == 0 and "done" in w.text() and "Traceback" not in w.text(), w.text()
    assert tail < TAIL_S
    assert w.group_alive() == []


def test_sighup_is_a_preemption(tmp_path):
    run = tmp_path / "run"
    w = _train(run, 5000, "checkpoint.every_steps=1000")
    _wait_for_step(run, 3, w)
    os.kill(w.p.pid, signal.SIGHUP)
    code, _ = w.wait()
    assert code == 75, w.text()[-3000:]
    stop = [e for e in events(run) if e["kind"] == "preempted"]
    assert stop and "SIGHUP" in stop[0]["reason"]
    step = summary(run)["steps"]
    assert (run / "checkpoints" / f"step-{step:08d}" / "COMMITTED").is_file()
    p = rubin(["train", "--quiet", *mlp_args(run, step + 2, "checkpoint.every_steps=1000")])
    assert p.returncode == 0, p.stderr[-2000:]
    assert [e["step"] for e in events(run) if e["kind"] == "resume"] == [step]


def test_signals_after_the_emergency_save_committed_do_not_change_exit_75(tmp_path):
    run = tmp_path / "run"
    w = _train(run, 5000, "checkpoint.every_steps=1000")
    _wait_for_step(run, 3, w)
    os.kill(w.p.pid, signal.SIGINT)
    deadline = time.monotonic() + 240
    while not list((run / "checkpoints").glob("step-*/COMMITTED")):  # the emergency save has committed
        assert time.monotonic() < deadline and w.p.poll() is None, w.text()[-3000:]
        time.sleep(0.005)
    while w.p.poll() is None:  # from then on, a stream of Ctrl-C, SIGTERM and SIGHUP until it exits
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            try:
                os.kill(w.p.pid, sig)
            except ProcessLookupError:
                break
        time.sleep(0.01)
    code, _ = w.wait()
    assert code == 75, f"exit {code}:\n{w.text()[-3000:]}"
