"""``run.deterministic``: what it pins, checked in fresh processes, and bit-identical results on busy cores.

The slow tests run the training processes with 2 intra-op threads (the fault tests use 1) while another
process keeps a core busy: three runnable threads on two cores (more under the suite's second worker),
the conditions under which a step's result could depend on how the threads were scheduled.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faultkit import child_env, ckpt, train_cmd
from trainhelp import summary
from utils import ROOT, run_rubin

REPRO = Path(__file__).with_name("determinism_repro.py")
# A core kept busy until the test's process is gone (a timeout that skips teardown still ends it).
BUSY = ("import os, torch\ntorch.set_num_threads(1)\nparent = os.getppid()\na = torch.randn(384, 384)\n"
        "while os.getppid() == parent:\n    a = (a @ a).tanh()\n")
# The workload, smaller: a 4 x 768 MLP (its first layer has the 768 x 64 weight whose update
# diverged), AdamW with its CPU defaults, grad clip 1.0. 200 steps, not 400: the divergence the issue traced
# starts at the first optimizer step; a checkpoint every 10 steps leaves room for ten kills.
WIDE = ["run.epochs=null", "run.deterministic=true", "model.name=mlp", "model.args={hidden: 768, depth: 4}",
        "data.name=synthetic", "data.args={num_samples: 2048, features: 64, num_classes: 10}",
        "data.batch_size=64", "data.num_workers=0", "optim.name=adamw", "optim.grad_clip=1.0",
        "telemetry.log_every_steps=5", "checkpoint.every_steps=10", "checkpoint.keep_last=3", "run.max_steps=200"]
TWO_THREADS = {"OMP_NUM_THREADS": "2"}


def _fresh(code: str, **env) -> dict:
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, **env})
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_pin_turns_dynamic_threading_off_and_enters_vector_math_before_a_step():
    got = _fresh(
        "import json, torch\n"
        "from rubin.train import determinism as d\n"
        "omp, mkl = d._libgomp(), d._mkl()\n"
        "before = {'dynamic': omp.omp_get_dynamic(), 'vml': mkl.vmlGetMode() if mkl else None}\n"
        "applied = d.pin(torch.device('cpu'))\n"
        "after = {'dynamic': omp.omp_get_dynamic(), 'vml': mkl.vmlGetMode() if mkl else None}\n"
        "print(json.dumps({'before': before, 'after': after, 'applied': applied,\n"
        "                  'det': torch.are_deterministic_algorithms_enabled(), 'threads': torch.get_num_threads()}))\n",
        OMP_DYNAMIC="true", OMP_NUM_THREADS="2")
    assert got["before"]["dynamic"] == 1  # the environment asked for dynamic thread teams
    assert got["after"]["dynamic"] == 0 and got["applied"]["omp_dynamic"] is False
    assert got["det"] is True and got["threads"] == 2 and got["applied"]["intra_op_threads"] == 2
    if got["before"]["vml"] is not None:  # an MKL build: its vector math was entered once before any step
        assert got["after"]["vml"] != got["before"]["vml"]
        assert {"sqrt", "exp", "log", "tanh"} <= set(got["applied"]["vml_warmed"])
        assert got["applied"]["mkl_dynamic"] is False


def test_a_deterministic_run_records_what_it_pinned_in_its_env(tmp_path):
    small = ["model.args={hidden: 16, depth: 1}", "run.max_steps=2", "checkpoint.every_steps=null"]
    on, off = tmp_path / "on", tmp_path / "off"
    assert run_rubin(train_cmd(on, WIDE, *small)[3:], env=child_env(**TWO_THREADS)).returncode == 0
    assert run_rubin(train_cmd(off, WIDE, *small, "run.deterministic=false")[3:],
                     env=child_env(**TWO_THREADS)).returncode == 0
    pinned = json.loads((on / "env.json").read_text())["determinism"]
    assert pinned["intra_op_threads"] == 2 and pinned["deterministic_algorithms"] is True
    assert pinned.get("omp_dynamic") is False
    assert "determinism" not in json.loads((off / "env.json").read_text())


@pytest.fixture
def busy_cores():
    """A process that keeps a core busy for the length of the test, ended after it. One is enough to
    oversubscribe the cores under a 2-thread run; a second one only slowed the rest of the suite."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    yield procs
    for p in procs:
        p.kill()
        p.wait(timeout=30)


def _repro_digests(n: int, *flags: str) -> list[str]:
    """N fresh processes of the plain-torch reproduction, two at a time, each with 2 threads."""
    p = subprocess.run([sys.executable, str(REPRO), "--procs", str(n), *flags], capture_output=True, text=True,
                       env={**os.environ, **TWO_THREADS}, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    digests = p.stdout.split()
    assert len(digests) == n and all(len(d) == 16 for d in digests)
    return digests


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_plain_torch_reproduction_is_bit_identical_with_the_pin_on_busy_cores(busy_cores):
    pinned = _repro_digests(12, "--pin")
    unpinned = _repro_digests(8)
    # Without the pin the issue saw 3 digests in 48 processes; on a machine where the race does not
    # fire they agree too, so only the pinned side is held to one digest. Both are printed for the record.
    print(f"pinned: {len(set(pinned))} digest(s) in 12; unpinned: {len(set(unpinned))} digest(s) in 8")
    assert len(set(pinned)) == 1
    assert pinned[0] in unpinned  # the pin changes no result: it is the race-free value


def _train_until_killed(run, rng: random.Random) -> int:
    """Start the run (resuming), wait for one more committed checkpoint, then SIGKILL it a random moment later.
    Returns the step it had reached, or -1 when it finished first."""
    done_before = {p.name for p in (run / "checkpoints").glob("step-*")} if (run / "checkpoints").exists() else set()
    proc = subprocess.Popen(train_cmd(run, WIDE), env=child_env(**TWO_THREADS), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            new = {p.name for p in (run / "checkpoints").glob("step-*") if (p / "COMMITTED").exists()} - done_before
            if new:
                break
            time.sleep(0.05)
        if proc.poll() is not None:
            assert proc.returncode == 0, proc.stderr.read()[-2000:]
            return -1
        time.sleep(rng.uniform(0.0, 0.15))  # somewhere inside the next checkpoint interval
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        assert proc.returncode == -9
        return max(int(p.name.split("-")[1]) for p in (run / "checkpoints").glob("step-*"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        proc.stderr.close()


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_ten_kills_under_load_resume_bit_identical_to_reruns_under_load(tmp_path, busy_cores):
    # two uninterrupted reruns, side by side on the same busy cores (each is load for the other)
    refs = [subprocess.Popen(train_cmd(tmp_path / f"ref{i}", WIDE), env=child_env(**TWO_THREADS), cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        errs = [p.communicate(timeout=900)[1] for p in refs]
    finally:
        for p in refs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=60)
    assert [p.returncode for p in refs] == [0, 0], errs[0][-1000:] + errs[1][-1000:]
    digests = [summary(tmp_path / f"ref{i}")["param_digest"] for i in range(2)]
    assert digests[0] == digests[1]
    run, rng, kills = tmp_path / "killed", random.Random(28), []
    while len(kills) < 10:
        reached = _train_until_killed(run, rng)
        if reached < 0:
            break
        kills.append(reached)
    assert len(kills) == 10, f"the run finished after {len(kills)} kills: {kills}"
    final = subprocess.run(train_cmd(run, WIDE), env=child_env(**TWO_THREADS), cwd=ROOT, capture_output=True,
                           text=True, timeout=900)
    assert final.returncode == 0, final.stderr[-2000:]
    s = summary(run)
    assert s["status"] == "completed" and s["steps"] == 200
    assert ckpt(run, 200).exists()
    assert s["param_digest"] == digests[0], f"killed at checkpoints {kills}"
