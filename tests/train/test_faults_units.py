"""Fault primitives in one process: signals, NaN/spike decisions, injection specs, heartbeat, culprit naming."""

import os
import signal
import time

import pytest

from rubin.errors import RubinError
from rubin.train import faults
from rubin.train.faults import inject
from rubin.train.faults.policy import Heartbeat
from rubin.train.faults.watchdog import heartbeat_path, read_all


def test_signal_only_sets_a_flag_and_records_it():
    before = signal.getsignal(signal.SIGUSR1)  # an earlier in-process test may have left its own handler
    h = faults.PreemptionHandler().install()
    try:
        assert not h.requested
        t0 = time.monotonic()
        os.kill(os.getpid(), signal.SIGUSR1)
        for _ in range(100):
            if h.requested:
                break
            time.sleep(0.01)
        assert h.requested and h.signal_name == "SIGUSR1" and h.received_at >= t0
    finally:
        h.uninstall()
    assert signal.getsignal(signal.SIGUSR1) == before


def test_worker_init_ignores_stop_signals_and_seeds():
    import random

    import numpy as np

    prev = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        faults.worker_init(0)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN and signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        import torch

        s = torch.initial_seed() % 2**32
        a = (random.random(), np.random.rand())
        random.seed(s)
        np.random.seed(s)
        assert a == (random.random(), np.random.rand())
    finally:
        for s, h in prev.items():
            signal.signal(s, h)


def _ignores(pid: int, sig: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigIgn:"))
    return bool(mask & (1 << (sig - 1)))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads signal masks from /proc (Linux)")
def test_dataloader_workers_survive_sigterm_to_the_group():
    import torch
    from torch.utils.data import DataLoader

    loader = DataLoader(list(range(64)), batch_size=4, num_workers=2, worker_init_fn=faults.worker_init, persistent_workers=True)
    it = iter(loader)
    try:
        next(it)
        pids = [w.pid for w in it._workers]
        for pid in pids:  # a signal that lands before worker_init has run would kill it: wait until it ignores SIGTERM
            deadline = time.monotonic() + 60
            while not _ignores(pid, signal.SIGTERM) and time.monotonic() < deadline:
                time.sleep(0.02)
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        time.sleep(0.3)  # give a worker that would die on SIGTERM the time to do so
        rest = [b for b in it]  # would raise "DataLoader worker exited unexpectedly" if they had died
        assert sum(len(b) for b in rest) == 60 and all(isinstance(b, torch.Tensor) for b in rest)
    finally:
        it._shutdown_workers()  # workers ignore SIGTERM: left alive, they would block pytest's exit
    assert all(not w.is_alive() for w in it._workers)


def test_nan_policies_decide():
    assert faults.NanGuard("skip").decide(4).action == "skip"
    g = faults.NanGuard("rollback", max_rollbacks=2)
    assert [g.decide(4, n).action for n in range(3)] == ["rollback", "rollback", "halt"]
    assert "faults.max_rollbacks=2" in g.decide(4, 2).message
    assert g.decide(4, 0, have_checkpoint=False).action == "halt"
    d = faults.NanGuard("halt").decide(9)
    with pytest.raises(RubinError, match="step 9 .*nan_policy=halt"):
        faults.NanGuard("halt").halt(d)
    with pytest.raises(RubinError, match="faults.nan_policy='stop'"):
        faults.NanGuard("stop")


def test_spike_detector():
    sd = faults.SpikeDetector(3.0, window=20)
    assert not any(sd.update(1.0 + 0.01 * i) for i in range(15))
    assert sd.update(10.0)
    assert not sd.update(2.0)
    assert sd.update(10.0)  # the first spike did not enter the history


def test_inject_specs_and_points(monkeypatch):
    specs = inject.parse("crash@step=7,rank=1; nan@step=4;diskfull@save=2;stall@step=5,rank=0,phase=checkpoint")
    assert [f.kind for f in specs] == ["crash", "nan", "diskfull", "stall"]
    assert specs[0].matches("step", 7, 1) and not specs[0].matches("step", 7, 0) and not specs[0].matches("step", 6, 1)
    assert specs[3].matches("checkpoint", 5, 0) and not specs[3].matches("step", 5, 0)
    with pytest.raises(RubinError, match="RUBIN_FAULT='boom@step=1'"):
        inject.parse("boom@step=1")
    with pytest.raises(RubinError, match="keys are"):
        inject.parse("crash@when=1")
    monkeypatch.setenv("RUBIN_FAULT", "nan@step=4")
    inject.reload()
    try:
        assert faults.fault_point("nan", 4, 0) and not faults.fault_point("nan", 3, 0) and not faults.fault_point("step", 4, 0)
        monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
        assert not faults.fault_point("nan", 4, 0)  # a restarted group does not hit the same fault again
    finally:
        monkeypatch.delenv("RUBIN_FAULT")
        inject.reload()
    assert not faults.fault_point("nan", 4, 0)


def test_heartbeat_beats_in_memory_and_only_flush_writes(tmp_path):
    hb = Heartbeat(tmp_path, 3)
    for step in range(1, 50):
        hb.beat(step, "forward")
    assert not heartbeat_path(tmp_path, 3).exists()  # the loop's thread never writes: the watchdog's flush does
    hb.flush()
    state = read_all(tmp_path, 4)[3]
    assert state["step"] == 49 and state["phase"] == "forward"
    assert read_all(tmp_path, 4)[0] is None


def test_stalled_ranks_names_the_culprit():
    now = time.time()
    b = lambda step, phase, beat=now: {"step": step, "phase": phase, "beat_time": beat, "written_time": now}  # noqa: E731
    assert faults.stalled_ranks({0: b(5, "collective"), 1: b(4, "forward")}, now)[0] == [1]
    assert faults.stalled_ranks({0: b(5, "collective"), 1: b(5, "forward")}, now)[0] == [1]
    assert faults.stalled_ranks({0: b(5, "collective"), 1: None}, now)[0] == [1]
    stale = {0: b(5, "collective"), 1: dict(b(5, "collective"), written_time=now - 60)}
    assert faults.stalled_ranks(stale, now)[0] == [1]
    assert faults.stalled_ranks({0: b(5, "collective", now - 9), 1: b(5, "collective")}, now)[0] == [0]


def test_watchdog_report_in_process(tmp_path):
    hb = Heartbeat(tmp_path, 0)
    hits = []
    wd = faults.Watchdog(hb, 0.3, tmp_path, 0, 1, on_hang=hits.append, exit=False, poll_s=0.05).start()
    hb.beat(2, "backward")
    deadline = time.monotonic() + 10
    while not hits and time.monotonic() < deadline:
        time.sleep(0.05)
    wd.stop()
    assert hits and hits[0]["stalled_ranks"] == [0] and hits[0]["phase"] == "backward"
    assert read_all(tmp_path, 1)[0]["phase"] == "backward"  # the watchdog's thread wrote the loop's beat
    text = (tmp_path / "hang-rank-0.txt").read_text()
    assert "step: 2" in text and "test_watchdog_report_in_process" in text


def test_watchdog_gives_slow_phases_their_own_limit(tmp_path):
    hb = Heartbeat(tmp_path, 0)
    hits = []
    wd = faults.Watchdog(hb, 0.2, tmp_path, 0, 1, on_hang=hits.append, exit=False, poll_s=0.05,
                         phase_timeouts={"checkpoint": 30}).start()
    hb.beat(1, "checkpoint")
    time.sleep(0.8)  # 4x the step timeout, inside the checkpoint allowance
    assert hits == []
    hb.beat(1, "forward")  # back to a normal phase of the same step: the step limit applies again
    deadline = time.monotonic() + 10
    while not hits and time.monotonic() < deadline:
        time.sleep(0.05)
    wd.stop()
    assert hits and hits[0]["phase"] == "forward"


def _hooks(tmp_path, *, fp16=False, spike_factor=None):
    from types import SimpleNamespace

    from rubin.runs import RunDir
    from rubin.train.config import Config
    from rubin.train.faults.policy import FaultPolicy

    cfg = Config.model_validate({"run": {"max_steps": 10}, "faults": {"nan_policy": "rollback", "spike_factor": spike_factor}})
    run = RunDir(tmp_path)
    run.create()
    info = SimpleNamespace(rank=0, world_size=1, device=None, backend=None, is_main=True)
    return FaultPolicy(cfg, info, run, fp16=fp16), run


def test_check_reads_every_recorded_step_and_names_the_first_bad_one(tmp_path):
    import torch

    h, _ = _hooks(tmp_path)
    t = torch.tensor
    for step, (loss, norm) in enumerate([(1.0, 2.0), (1.0, float("inf")), (float("nan"), 1.0), (1.0, 1.0)], start=1):
        h.record(step, [0, 32 * (step - 1)], t(loss), t(norm))
    flags = h.check(4)
    assert (flags.bad_step, flags.position, flags.grad_norm) == (2, [0, 32], float("inf"))  # the first one, not the last
    assert not flags.stop and not flags.save
    assert h.check(5).bad_step is None  # what was read is not read again


def test_fp16_overflow_is_the_scalers_job_and_a_spike_counts_as_bad(tmp_path):
    import torch

    h, _ = _hooks(tmp_path, fp16=True)
    h.record(1, [0, 0], torch.tensor(1.0), torch.tensor(float("inf")))
    assert h.check(1).bad_step is None  # GradScaler skips that step itself
    h, run = _hooks(tmp_path / "b", spike_factor=3.0)
    for step in range(1, 12):
        h.record(step, [0, step], torch.tensor(1.0), torch.tensor(1.0))
    h.record(12, [0, 12], torch.tensor(10.0), torch.tensor(1.0))
    assert h.check(12).bad_step == 12
    assert any("loss spike" in e.get("message", "") for e in run.events())
