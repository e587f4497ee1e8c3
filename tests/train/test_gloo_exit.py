"""A rank's exit waits for gloo's worker threads: one still freeing a tensor must not meet interpreter shutdown."""

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rubin.platform import process_group
from rubin.platform.process_group import GLOO_WORKER, wait_gloo_idle
from rubin.train import distributed

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the wait reads /proc")

# Two gloo ranks. Rank 1 hands a tensor to an all-reduce and drops it, so the gloo worker that
# finishes the all-reduce frees it, running the tensor's finalizer in that worker thread: a second
# of CPU. Rank 1 then leaves while the worker is still at it, keeping the group referenced as torch
# does after FSDP has run (so destroy_process_group stops no thread). A barrier is left out: it would
# queue behind the worker's release. In a real run the worker is late a step earlier, preempted
# before it takes that queue's lock, which a test cannot arrange.
RANK = """
import json, sys, threading, time, weakref
import torch, torch.distributed as dist
from rubin.platform.process_group import wait_gloo_idle

rank, folder, wait = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "wait"
dist.init_process_group("gloo", init_method=f"file://{folder}/group", rank=rank, world_size=2)
gate = dist.FileStore(f"{folder}/gate", 2)
if rank == 0:
    gate.wait(["dropped"])
    dist.all_reduce(torch.ones(4))
    dist.destroy_process_group()
    sys.exit(0)
started, finished, seen = threading.Event(), threading.Event(), {}

def release():
    seen["thread"] = open(f"/proc/self/task/{threading.get_native_id()}/comm").read().strip()
    started.set()
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        pass
    finished.set()

t = torch.ones(4)
weakref.finalize(t, release)
dist.all_reduce(t, async_op=True)
del t
gate.set("dropped", "1")
assert started.wait(120)
keep = dist.group.WORLD
if wait:
    seen["idle"] = wait_gloo_idle()
seen["finished"] = finished.is_set()
dist.destroy_process_group()
print(json.dumps(seen), flush=True)
"""


def _run_ranks(folder: Path, mode: str) -> list[subprocess.CompletedProcess]:
    script = folder / "rank.py"
    script.write_text(RANK)
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(folder), mode], cwd=folder,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    done = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=180)
            done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return done


@linux
@pytest.mark.slow
def test_a_rank_waits_for_the_gloo_worker_before_it_exits(tmp_path):
    r0, r1 = _run_ranks(tmp_path, "wait")
    assert (r0.returncode, r1.returncode) == (0, 0), r0.stderr[-2000:] + r1.stderr[-2000:]
    seen = json.loads(r1.stdout.strip().splitlines()[-1])
    assert seen == {"thread": GLOO_WORKER, "idle": True, "finished": True}


@linux
@pytest.mark.slow
@pytest.mark.skipif(sys.version_info >= (3, 14), reason="from 3.14 a thread taking the GIL at shutdown hangs instead of exiting")
def test_without_the_wait_the_same_exit_aborts(tmp_path):
    """The failure the wait prevents: std::terminate in the worker, SIGABRT, though the rank had finished."""
    r0, r1 = _run_ranks(tmp_path, "no-wait")
    assert r0.returncode == 0, r0.stderr[-2000:]
    assert r1.returncode == -signal.SIGABRT, r1.stdout + r1.stderr[-2000:]
    assert "terminate called without an active exception" in r1.stderr
    assert json.loads(r1.stdout.strip().splitlines()[-1])["finished"] is False


@linux
def test_the_wait_gives_up_at_its_timeout_and_ends_once_the_worker_sleeps():
    name, named, spin, stop = "rubin-test-wkr", threading.Event(), threading.Event(), threading.Event()
    spin.set()

    def worker():
        Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text(name)
        named.set()
        while spin.is_set():  # runnable throughout: never idle
            pass
        stop.wait()  # asleep until told, like a gloo worker waiting for its next collective

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        assert named.wait(30)
        assert wait_gloo_idle(timeout_s=0.3, name=name) is False
        spin.clear()
        assert wait_gloo_idle(timeout_s=60, name=name) is True
    finally:
        spin.clear()
        stop.set()
        thread.join(30)
    assert wait_gloo_idle(timeout_s=0.3, name="no-such-thread") is True


@pytest.fixture
def calls(monkeypatch):
    """What leaving the group called, in order (barrier, wait, destroy), with a group that says it is up."""
    import torch.distributed as dist

    seen = []
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "barrier", lambda: seen.append("barrier"))
    monkeypatch.setattr(dist, "destroy_process_group", lambda: seen.append("destroy"))
    monkeypatch.setattr(process_group, "wait_gloo_idle", lambda: seen.append("wait"))
    return seen


def test_teardown_waits_for_gloo_between_the_barrier_and_destroy(calls):
    info = distributed.DistInfo(world_size=2, initialized=True)
    distributed.teardown(info)
    assert calls == ["barrier", "wait", "destroy"] and not info.initialized


def test_abort_destroys_without_a_barrier_or_a_wait(calls):
    info = distributed.DistInfo(world_size=2, initialized=True)
    distributed.abort(info)
    distributed.teardown(info)  # already left: nothing more
    assert calls == ["destroy"] and not info.initialized
