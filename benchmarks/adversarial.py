"""Adversarial cases against rubin, as a hostile or careless user would try them.

    python benchmarks/adversarial.py [--groups config,commands,...] [--list]

Every case runs a real command (in-process for the cheap ones, a real process where signals,
locks or file limits are involved) and is judged on four things, printed per group:

- clean:     handled as designed: a one-line error with the documented exit code, or the
             documented recovery (fall back, resume, exit 75)
- internal:  "internal error" on stderr (a bug reached the boundary)
- traceback: a Python traceback on stderr without --debug
- lost:      data lost or left behind (a run dir made for bad input, a checkpoint deleted instead
             of kept as evidence, a payload that ran, results not written)

The target is zero internal errors, zero tracebacks and zero losses.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "hardening")]

from hardkit import Payload, events, mlp_args, plant_dcp_attack, recommit, step_dir  # noqa: E402
from utils import invoke  # noqa: E402

SAS = "https://acct.blob.core.windows.net/d/train?sv=2022-11-02&se=2031-01-01&sp=r&sig=SECRETSIG%2Babc%3D"


@dataclass
class Outcome:
    code: int
    stdout: str = ""
    stderr: str = ""
    lost: list[str] = field(default_factory=list)


@dataclass
class Case:
    group: str
    name: str
    run: Callable[[Path], Outcome]
    expect: tuple = (2,)


CASES: list[Case] = []


def case(group: str, name: str, expect=(2,)):
    def add(fn):
        CASES.append(Case(group, name, fn, tuple(expect)))
        return fn
    return add


def cli(args) -> Outcome:
    r = invoke([str(a) for a in args])
    return Outcome(r.exit_code, r.stdout, r.stderr)


def proc(args, env=None, timeout=600, **kw) -> Outcome:
    full = dict(os.environ, OMP_NUM_THREADS="1")
    full.update(env or {})
    p = subprocess.run([sys.executable, "-m", "rubin", *map(str, args)], capture_output=True, text=True, env=full,
                       timeout=timeout, cwd=ROOT, stdin=subprocess.DEVNULL, **kw)
    return Outcome(p.returncode, p.stdout, p.stderr)


# -- config ------------------------------------------------------------------------------------------
BAD_SETS = [
    "run.nme=x", "model.nme=mlp", "data.nme=x", "optim.lrr=1", "distributed.strat=ddp", "checkpoint.every=3",
    "telemetry.sink=[jsonl]", "faults.nan=skip", "foo.bar=1", "precison=fp32",
    "run.max_steps=many", "run.seed=abc", "data.batch_size=abc", "data.batch_size=0", "data.batch_size=-1",
    "optim.lr=-1", "optim.lr=0", "optim.lr=inf", "optim.lr=.nan", "optim.lr=1e308", "optim.lr=1.0e+308",
    "optim.weight_decay=inf", "optim.weight_decay=-1", "optim.betas=[2,-1]", "optim.betas=[0.9]", "optim.betas=abc",
    "optim.momentum=-1", "optim.warmup_steps=-1", "optim.min_lr_ratio=2", "optim.grad_clip=0", "optim.name=lion",
    "run.seed=-1", "run.seed=99999999999999999999999", "run.max_steps=0", "run.max_steps=1.5",
    "run.eval_every_steps=-1", "run.device=tpu", "precision=fp8", "precision=fp16", "precision=bf16x",
    "distributed.strategy=ddp", "distributed.strategy=fsdp", "distributed.strategy=pipeline", "distributed.backend=nccl",
    "distributed.timeout_s=0", "distributed.timeout_s=inf", "checkpoint.keep_last=0", "checkpoint.every_steps=0",
    "checkpoint.every_minutes=-1", "checkpoint.async_policy=maybe", "checkpoint.preemption_grace_s=inf",
    "telemetry.log_every_steps=0", "telemetry.sinks=[wandbb]", "faults.nan_policy=stop", "faults.spike_factor=0.5",
    "faults.max_rollbacks=-1", "data.num_workers=-1", "data.name=imagenet", "model.name=transformerz",
    "data.micro_batch_size=5", "model.import=no_such_pkg.mod:fn", "data.import=nosuch", "model.args={bogus: 1}",
    "data.args={bogus: 1}", "data.batch_size=100000", "run.name=../../x", "run.name=a/b", "run.name=..",
    "run.name=", "run.dir=/dev/null", "data.task=regression", "data.prefetch_factor=0",
]


def _no_run_dir(out: Outcome, run: Path) -> Outcome:
    if run.exists():
        out.lost.append(f"run dir {run} was made for bad input")
    return out


for _s in BAD_SETS:
    def _bad_set(tmp, s=_s):
        run = tmp / "run"
        sets = ["run.max_steps=null", "run.epochs=.inf"] if s == "run.epochs=inf" else [s]
        return _no_run_dir(cli(["train", "--quiet", *mlp_args(run, 4, *sets)]), run)
    case("config", f"--set {_s}")(_bad_set)

for _name, _text in [("latin-1 file", "run:\n  name: caf\xe9\n".encode("latin-1")), ("binary file", bytes(range(256))),
                     ("garbled YAML", b"run: [unclosed\n"), ("a list, not a mapping", b"- a\n- b\n"),
                     ("duplicate top-level key", b"optim:\n  lr: 0.1\noptim:\n  lr: 0.2\n"),
                     ("duplicate nested key", b"optim:\n  lr: 0.1\n  lr: 0.2\n"), ("unknown section", b"trainer:\n  x: 1\n"),
                     ("a scalar", b"42\n"), ("tab-indented YAML", b"run:\n\tname: x\n")]:
    def _cfg(tmp, text=_text):
        p = tmp / "cfg.yaml"
        p.write_bytes(text)
        return _no_run_dir(cli(["train", p, "--quiet", *mlp_args(tmp / "run", 4)]), tmp / "run")
    case("config", f"config file: {_name}")(_cfg)


@case("config", "config path is a directory")
def _(tmp):
    return cli(["train", tmp, "--quiet"])


@case("config", "config path does not exist")
def _(tmp):
    return cli(["train", tmp / "nope.yaml", "--quiet"])


@case("config", "config JSON with a duplicate key")
def _(tmp):
    (tmp / "c.json").write_text('{"optim": {"lr": 0.1}, "optim": {"lr": 0.2}}')
    return _no_run_dir(cli(["train", tmp / "c.json", "--quiet", *mlp_args(tmp / "run", 4)]), tmp / "run")


@case("config", "run.dir under a file")
def _(tmp):
    (tmp / "f").write_text("x")
    out = cli(["train", "--quiet", *mlp_args(tmp / "f" / "run", 4)])
    if (tmp / "f").read_text() != "x":
        out.lost.append("the file was changed")
    return out


for _bad, _label in [(b"run: [x\n", "garbled"), (b"- 1\n", "non-mapping"), (b"\xff\xfe", "not UTF-8")]:
    def _existing(tmp, bad=_bad):
        run = tmp / "run"
        run.mkdir()
        (run / "config.yaml").write_bytes(bad)
        out = cli(["train", "--quiet", *mlp_args(run, 4)])
        if (run / "config.yaml").read_bytes() != bad or (run / "events.jsonl").exists():
            out.lost.append("the existing run dir was changed")
        return out
    case("config", f"existing run dir with a {_label} config.yaml")(_existing)

for _args, _label in [(["--set", "noequals"], "--set without '='"), (["--set", ".x=1"], "--set with an empty section"),
                      (["--set", "run=1"], "--set replacing a section by a value")]:
    def _set(tmp, a=_args):
        return _no_run_dir(cli(["train", "--quiet", *mlp_args(tmp / "run", 4), *a]), tmp / "run")
    case("config", _label)(_set)


# -- commands ----------------------------------------------------------------------------------------
_TINY = ["--quick", "--no-plot", "--set", "launch.kernels=20", "--set", "launch.trials=3"]


@case("commands", "bench --out pointing at a directory", expect=(0,))
def _(tmp):
    out = cli(["bench", "launch", "--out", tmp, *_TINY])
    if not list(tmp.glob("rubin-bench-*.json")):
        out.lost.append("results not written")
    return out


for _args, _label in [(["--plot", "p.bmp"], "--plot p.bmp"), (["--set", "matmul.trials=-1"], "--set matmul.trials=-1"),
                      (["--set", "matmul.trials=0"], "trials=0"), (["--set", "matmul.trialz=3"], "unknown param"),
                      (["--set", "matmul.shapes=[[1,-2,3]]"], "negative shape"), (["--set", "matmul.dtypes=[]"], "empty list"),
                      (["--set", "nosuite.x=1"], "unknown suite"), (["--set", "matmul"], "--set without '='"),
                      (["--set", "collectives.timeout_s=.inf"], "timeout inf"), (["--ranks", "1"], "--ranks 1"),
                      (["--io-dir", "/nonexistent"], "--io-dir missing"), (["--out", "FILE/x.json"], "--out under a file"),
                      (["--set", "matmul.trials=[1"], "garbled YAML value")]:
    def _bench(tmp, a=_args):
        (tmp / "FILE").write_text("x")
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            out = cli(["bench", "matmul", "--quick", *a])
        finally:
            os.chdir(cwd)
        left = sorted(p.name for p in tmp.iterdir() if p.name != "FILE")
        if left:
            out.lost.append(f"left behind: {left}")
        return out
    case("commands", f"bench {_label}")(_bench)


@case("commands", "bench: unknown suite name")
def _(tmp):
    return cli(["bench", "matmull", "--quick", "--out", tmp / "r.json"])


_RESULTS: dict = {}


def results_file(tmp_root: Path) -> Path:
    if "path" not in _RESULTS:
        p = tmp_root / "base.json"
        r = cli(["bench", "launch", "--out", p, *_TINY])
        assert r.code == 0, r.stderr
        _RESULTS["path"] = p
    return _RESULTS["path"]


def _edited(tmp, edit) -> Path:
    doc = json.loads(results_file(tmp.parent).read_text())
    edit(doc)
    p = tmp / "bad.json"
    p.write_text(json.dumps(doc))
    return p


_COMPARE = {
    "a binary file": lambda tmp: (tmp / "b.bin").write_bytes(bytes(range(256)) * 8) and tmp / "b.bin",
    "a directory": lambda tmp: tmp,
    "a missing file": lambda tmp: tmp / "missing.json",
    "ci95 of length 1": lambda tmp: _edited(tmp, lambda d: d["benchmarks"]["launch"]["rows"][0]["wall_us"].update(ci95=[1.0])),
    "ci95 of length 3": lambda tmp: _edited(tmp, lambda d: d["benchmarks"]["launch"]["rows"][0]["wall_us"].update(ci95=[1, 2, 3])),
    "a row without its device": lambda tmp: _edited(tmp, lambda d: d["benchmarks"]["launch"]["rows"][0].pop("device")),
    "a median that is a string": lambda tmp: _edited(tmp, lambda d: d["benchmarks"]["launch"]["rows"][0]["wall_us"].update(median="x")),
    "another kind of file": lambda tmp: _edited(tmp, lambda d: d.update(kind="something.else")),
    "schema_version 99": lambda tmp: _edited(tmp, lambda d: d.update(schema_version=99)),
    "a JSON list": lambda tmp: (tmp / "l.json").write_text("[1, 2]") and tmp / "l.json",
    "garbage JSON": lambda tmp: (tmp / "g.json").write_text("{not json") and tmp / "g.json",
}
for _label, _make in _COMPARE.items():
    def _cmp(tmp, make=_make):
        return cli(["compare", results_file(tmp.parent), make(tmp)])
    case("commands", f"compare on {_label}")(_cmp)


@case("commands", "compare with three files")
def _(tmp):
    f = results_file(tmp.parent)
    return cli(["compare", f, f, f])


_RULES = {
    "version 7": "version: 7\nrules:\n  - name: x\n    metrics: ['*']\n    within_pct: 5\n",
    "an unknown key": "version: 1\nrulez: []\n",
    "within_pct inf": "version: 1\nrules:\n  - name: x\n    metrics: ['*']\n    within_pct: .inf\n",
    "rules that are ints": "version: 1\nrules: [1, 2]\n",
    "a duplicate key": "version: 1\nversion: 1\nrules: []\n",
    "no criterion": "rules:\n  - name: x\n    metrics: ['*']\n",
    "two criteria": "rules:\n  - name: x\n    metrics: ['*']\n    within_pct: 1\n    max_above_pct: 2\n",
    "an unknown key inside a rule": "rules:\n  - name: x\n    metrics: ['*']\n    within_pct: 5\n    within_pc: 1\n",
}
for _label, _text in _RULES.items():
    def _rules(tmp, text=_text):
        (tmp / "r.yaml").write_text(text)
        f = results_file(tmp.parent)
        return cli(["compare", f, f, "--rules", tmp / "r.yaml"])
    case("commands", f"rules file with {_label}")(_rules)


@case("commands", "rules file that does not exist")
def _(tmp):
    f = results_file(tmp.parent)
    return cli(["compare", f, f, "--rules", tmp / "nope.yaml"])


@case("commands", "checkpoint verify on a file")
def _(tmp):
    (tmp / "f").write_text("x")
    return cli(["checkpoint", "verify", tmp / "f"])


@case("commands", "checkpoint verify on a missing path")
def _(tmp):
    return cli(["checkpoint", "verify", tmp / "nope"])


@case("commands", "checkpoint verify on an empty dir", expect=(3,))
def _(tmp):
    return cli(["checkpoint", "verify", tmp])


for _cmd in (["env", "--json"], ["bench", "--list-gpus"], ["train", "--help-config"], ["checkpoint", "list", "EMPTY"],
             ["compare", "--list-metrics", "RESULTS"], ["doctor", "--help"]):
    def _pipe(tmp, c=_cmd):
        c = [str(tmp) if a == "EMPTY" else str(results_file(tmp.parent)) if a == "RESULTS" else a for a in c]
        cmd = " ".join([sys.executable, "-m", "rubin", *c])
        p = subprocess.run(["bash", "-c", f"{cmd} 2>{tmp}/err | true; exit ${{PIPESTATUS[0]}}"], capture_output=True, text=True,
                           timeout=300, cwd=ROOT)
        return Outcome(p.returncode, p.stdout, (tmp / "err").read_text())
    case("commands", f"`rubin {' '.join(_cmd[:2])} | true` (a reader that left)", expect=(0, 3))(_pipe)


# -- checkpoint tampering --------------------------------------------------------------------------------
_BASE: dict = {}


def crashed_run(tmp_root: Path) -> Path:
    """A 12-step run killed after step 8 (checkpoints at 4 and 8), made once and copied per case."""
    if "run" not in _BASE:
        run = tmp_root / "base-run"
        out = proc(["train", "--quiet", *mlp_args(run, 12)], env={"RUBIN_FAULT": "crash@step=9"})
        assert (step_dir(run, 8) / "COMMITTED").is_file(), out.stderr
        _BASE["run"] = run
    return _BASE["run"]


def _flip(p: Path, at: int = 100) -> None:
    with open(p, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))


def _relink(p: Path, target: Path) -> None:
    p.unlink()
    p.symlink_to(target)


def _evil_pt(p: Path, marker: Path) -> None:
    import torch

    torch.save({"x": Payload(marker)}, p)


TAMPER: dict[str, Callable[[Path, Path], None]] = {
    "model.pt truncated": lambda s, m: os.truncate(s / "model.pt", 100),
    "model.pt one byte flipped": lambda s, m: _flip(s / "model.pt"),
    "optim.pt one byte flipped": lambda s, m: _flip(s / "optim.pt"),
    "trainer.pt truncated": lambda s, m: os.truncate(s / "trainer.pt", 10),
    "rng file deleted": lambda s, m: (s / "rng-rank-0.pt").unlink(),
    "model.pt deleted": lambda s, m: (s / "model.pt").unlink(),
    "COMMITTED deleted": lambda s, m: (s / "COMMITTED").unlink(),
    "COMMITTED garbage": lambda s, m: (s / "COMMITTED").write_bytes(b"\xff\x00garbage"),
    "COMMITTED empty": lambda s, m: (s / "COMMITTED").write_bytes(b""),
    "COMMITTED is a directory": lambda s, m: ((s / "COMMITTED").unlink(), (s / "COMMITTED").mkdir()),
    "COMMITTED a JSON list": lambda s, m: (s / "COMMITTED").write_text("[1]"),
    "MANIFEST deleted": lambda s, m: (s / "MANIFEST.json").unlink(),
    "MANIFEST garbage": lambda s, m: (s / "MANIFEST.json").write_bytes(b"{{{"),
    "MANIFEST a JSON list": lambda s, m: (s / "MANIFEST.json").write_text("[]"),
    "MANIFEST edited": lambda s, m: (s / "MANIFEST.json").write_text((s / "MANIFEST.json").read_text().replace('"bytes"', '"bytez"', 1)),
    "an extra file added": lambda s, m: (s / "extra.pt").write_bytes(b"x"),
    "model.pt is a FIFO": lambda s, m: ((s / "model.pt").unlink(), os.mkfifo(s / "model.pt")),
    "model.pt is a directory": lambda s, m: ((s / "model.pt").unlink(), (s / "model.pt").mkdir()),
    "model.pt symlinked to another step": lambda s, m: _relink(s / "model.pt", s.parent / "step-00000004" / "model.pt"),
    "dcp/.metadata runs os.system (manifest recomputed)": lambda s, m: plant_dcp_attack(s, m),
    "model.pt pickle payload (manifest recomputed)": lambda s, m: (_evil_pt(s / "model.pt", m), recommit(s)),
    "trainer.pt pickle payload (manifest recomputed)": lambda s, m: (_evil_pt(s / "trainer.pt", m), recommit(s)),
    "rng pickle payload (manifest recomputed)": lambda s, m: (_evil_pt(s / "rng-rank-0.pt", m), recommit(s)),
    "plain pickle file as model.pt (manifest recomputed)": lambda s, m: ((s / "model.pt").write_bytes(pickle.dumps(Payload(m))),
                                                                          recommit(s)),
    "dcp dir without .metadata (manifest recomputed)": lambda s, m: ((s / "dcp").mkdir(), (s / "dcp" / "x.distcp").write_bytes(b"x"),
                                                                      recommit(s)),
}


def _tampered(tmp: Path, how) -> tuple[Path, Path]:
    run = tmp / "run"
    shutil.copytree(crashed_run(tmp.parent), run, symlinks=True)
    marker = tmp / "PAYLOAD-RAN"
    how(step_dir(run, 8), marker)
    return run, marker


def _payload_check(out: Outcome, marker: Path) -> Outcome:
    if marker.exists():
        out.lost.append("the payload ran")
    return out


for _label, _how in TAMPER.items():
    def _resume(tmp, how=_how):
        run, marker = _tampered(tmp, how)
        out = _payload_check(cli(["train", "--quiet", *mlp_args(run, 12)]), marker)
        resumed = [e.get("step") for e in events(run) if e.get("kind") == "resume"]
        if out.code == 0 and resumed[-1:] != [4]:
            out.lost.append(f"resumed from {resumed[-1:]} instead of falling back to step 4")
        if not (run / "checkpoints" / "quarantine" / "step-00000008").exists():
            out.lost.append("the invalid checkpoint was not kept as evidence")
        return out
    case("checkpoint", f"resume: {_label}", expect=(0,))(_resume)

    def _verify(tmp, how=_how):
        run, marker = _tampered(tmp, how)
        return _payload_check(cli(["checkpoint", "verify", run]), marker)
    case("checkpoint", f"verify: {_label}", expect=(3,))(_verify)


@case("checkpoint", "every checkpoint corrupt: refused without --force")
def _(tmp):
    run, _ = _tampered(tmp, lambda s, m: (_flip(s / "model.pt"), _flip(s.parent / "step-00000004" / "model.pt")))
    out = cli(["train", "--quiet", *mlp_args(run, 12)])
    if not (step_dir(run, 8) / "model.pt").exists() or not (step_dir(run, 4) / "model.pt").exists():
        out.lost.append("a corrupt checkpoint was removed")
    return out


@case("checkpoint", "every checkpoint corrupt, --force: moved aside, fresh start", expect=(0,))
def _(tmp):
    run, _ = _tampered(tmp, lambda s, m: (_flip(s / "model.pt"), _flip(s.parent / "step-00000004" / "model.pt")))
    out = cli(["train", "--quiet", "--force", *mlp_args(run, 12)])
    q = run / "checkpoints" / "quarantine"
    if not ((q / "step-00000008").exists() and (q / "step-00000004").exists()):
        out.lost.append("corrupt checkpoints were not kept")
    return out


@case("checkpoint", "signed run: weights swapped and manifest recomputed without the key", expect=(0,))
def _(tmp):
    run = tmp / "run"
    env = {"RUBIN_CHECKPOINT_KEY": "k-outside-the-run-dir"}
    proc(["train", "--quiet", *mlp_args(run, 12)], env={**env, "RUBIN_FAULT": "crash@step=9"})
    shutil.copy(step_dir(run, 4) / "model.pt", step_dir(run, 8) / "model.pt")
    recommit(step_dir(run, 8))
    out = proc(["train", "--quiet", *mlp_args(run, 12)], env=env)
    if [e.get("step") for e in events(run) if e.get("kind") == "resume"][-1:] != [4]:
        out.lost.append("resumed from the forged checkpoint")
    return out


for _label, _damage in [("non-UTF-8 bytes in events.jsonl", ("events.jsonl", b"\xff\xfe\x80\n")),
                        ("a torn last line in metrics.jsonl", ("metrics.jsonl", b'{"step": 9, "lo')),
                        ("NUL bytes in eval.jsonl", ("eval.jsonl", b"\x00\x00\x00\n"))]:
    def _logs(tmp, damage=_damage):
        run = tmp / "run"
        shutil.copytree(crashed_run(tmp.parent), run, symlinks=True)
        with open(run / damage[0], "ab") as f:
            f.write(damage[1])
        return cli(["train", "--quiet", *mlp_args(run, 12)])
    case("checkpoint", f"resume with {_label}", expect=(0,))(_logs)


@case("checkpoint", "an uncommitted step folder newer than the last checkpoint", expect=(0,))
def _(tmp):
    run = tmp / "run"
    shutil.copytree(crashed_run(tmp.parent), run, symlinks=True)
    shutil.copytree(step_dir(run, 8), step_dir(run, 43))
    (step_dir(run, 43) / "COMMITTED").unlink()
    out = cli(["train", "--quiet", *mlp_args(run, 12)])
    if [e.get("step") for e in events(run) if e.get("kind") == "resume"][-1:] != [8]:
        out.lost.append("did not resume from step 8")
    return out


# -- concurrency, signals, secrets, disk ---------------------------------------------------------------
def _popen_train(run, steps, *sets, env=None):
    full = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.Popen([sys.executable, "-m", "rubin", "train", "--quiet", *mlp_args(run, steps, *sets)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full, start_new_session=True)


def _wait(cond, timeout=300):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.05)


for _offset in (0, 1, 8):
    def _two_jobs(tmp, offset=_offset):
        run = tmp / "run"
        pause = {"RUBIN_FAULT": "pause@step=2,seconds=600"}
        a = _popen_train(run, 6, env=pause)
        t0 = time.monotonic()
        _wait(lambda: time.monotonic() - t0 >= offset)
        b = _popen_train(run, 6, env=pause)
        try:
            _wait(lambda: a.poll() is not None or b.poll() is not None)
            loser = a if a.poll() is not None else b
            _, err = loser.communicate()
            out = Outcome(loser.returncode, "", err)
            if "in use by PID" not in err:
                out.lost.append("the second job did not name the holder")
            if [e.get("kind") for e in events(run)].count("start") > 1:
                out.lost.append("both jobs wrote into the run")
        finally:
            for p in (a, b):
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
        return out
    case("concurrency", f"two jobs on one run dir, {_offset} s apart")(_two_jobs)


@case("concurrency", "a stale lock from a killed job is taken over", expect=(0,))
def _(tmp):
    run = tmp / "run"
    a = _popen_train(run, 6, env={"RUBIN_FAULT": "pause@step=2,seconds=600"})
    _wait(lambda: any(e.get("kind") == "start" for e in events(run)))
    os.killpg(a.pid, signal.SIGKILL)
    a.communicate()
    out = proc(["train", "--quiet", *mlp_args(run, 6)])
    if not [e for e in events(run) if e.get("kind") == "lock_taken_over"]:
        out.lost.append("no lock_taken_over event")
    return out


for _sig in ("SIGTERM", "SIGINT", "SIGUSR1", "SIGHUP"):
    def _signal(tmp, sig=_sig):
        run = tmp / "run"
        p = _popen_train(run, 5000, "checkpoint.every_steps=1000")
        _wait(lambda: (run / "metrics.jsonl").exists() and (run / "metrics.jsonl").stat().st_size > 600)
        os.kill(p.pid, getattr(signal, sig))
        _, err = p.communicate(timeout=300)
        out = Outcome(p.returncode, "", err)
        if not list((run / "checkpoints").glob("step-*/COMMITTED")):
            out.lost.append("no checkpoint committed on the signal")
        return out
    case("signals", f"{_sig} during training", expect=(75,))(_signal)


@case("signals", "a stream of signals right after the emergency save committed", expect=(75,))
def _(tmp):
    run = tmp / "run"
    p = _popen_train(run, 5000, "checkpoint.every_steps=1000")
    _wait(lambda: (run / "metrics.jsonl").exists() and (run / "metrics.jsonl").stat().st_size > 600)
    os.kill(p.pid, signal.SIGINT)
    _wait(lambda: bool(list((run / "checkpoints").glob("step-*/COMMITTED"))) or p.poll() is not None)
    while p.poll() is None:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            try:
                os.kill(p.pid, s)
            except ProcessLookupError:
                break
        time.sleep(0.01)
    _, err = p.communicate()
    return Outcome(p.returncode, "", err)


@case("secrets", "SAS URL in a bad data.path is not echoed")
def _(tmp):
    out = cli(["train", "--quiet", *mlp_args(tmp / "run", 4, "data.name=cifar10", "data.args={}", f"data.path={SAS}")])
    if "SECRETSIG" in out.stderr:
        out.lost.append("the signature was printed")
    return out


@case("secrets", "SAS URL in the config is not stored in the run dir", expect=(0,))
def _(tmp):
    run = tmp / "run"
    out = cli(["train", "--quiet", *mlp_args(run, 2, f"model.args={{hidden: 16, depth: 1, token_note: '{SAS}'}}")])
    if out.code == 2:  # the model rejects the extra argument: the echo must be redacted too
        out.code = 0 if "SECRETSIG" not in out.stderr else 1
    for p in run.rglob("*") if run.exists() else []:
        if p.is_file() and b"SECRETSIG" in p.read_bytes():
            out.lost.append(f"secret stored in {p.name}")
    return out


@case("secrets", "MLflow URI with a password is not echoed", expect=(1,))
def _(tmp):
    env = {"MLFLOW_TRACKING_URI": "https://user:SECRETPW@127.0.0.1:9/", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
           "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}
    out = proc(["train", "--quiet", *mlp_args(tmp / "run", 2, "telemetry.sinks=[jsonl, mlflow]")], env=env)
    if "SECRETPW" in out.stderr + out.stdout:
        out.lost.append("the password was printed")
    return out


for _token in ("hf_abcdefghijklmnopqrstuvwxyz0123", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "AKIAIOSFODNN7EXAMPLE"):
    def _tok(tmp, token=_token):
        out = cli(["train", "--quiet", *mlp_args(tmp / "run", 4, f"model.import=pkg_{token}:fn")])
        if token in out.stderr:
            out.lost.append("the token was printed")
        return out
    case("secrets", f"token {_token[:4]}... in an error line")(_tok)


@case("secrets", "internal error text with a presigned URL")
def _(tmp):
    import rubin.cli.env as env_cmd

    real = env_cmd.run
    env_cmd.run = lambda args: (_ for _ in ()).throw(RuntimeError(f"GET {SAS} failed"))
    try:
        out = cli(["env"])
    finally:
        env_cmd.run = real
    out.code = 2 if out.code == 1 and "SECRETSIG" not in out.stderr else out.code  # an internal error by design here
    if "SECRETSIG" in out.stderr:
        out.lost.append("the signature was printed")
    out.stderr = out.stderr.replace("internal error", "injected error")
    return out


def _file_limit(limit):
    def setup():
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    return setup


for _every, _label in [(20, "after a checkpoint"), (1000, "before any checkpoint")]:
    def _full(tmp, every=_every):
        run = tmp / "run"
        out = proc(["train", "--quiet", *mlp_args(run, 100, every=every)], preexec_fn=_file_limit(20000))
        raw = (run / "metrics.jsonl").read_bytes() if (run / "metrics.jsonl").exists() else b""
        if raw and not raw.endswith(b"\n"):
            out.lost.append("a torn line in metrics.jsonl")
        kept = "previous committed checkpoint is kept" in out.stderr
        if kept != (every == 20):
            out.lost.append("wrong claim about the kept checkpoint")
        return out
    case("disk", f"disk full while logging, {_label}", expect=(1,))(_full)


@case("disk", "disk full during a checkpoint save", expect=(1,))
def _(tmp):
    run = tmp / "run"
    out = proc(["train", "--quiet", *mlp_args(run, 12)], env={"RUBIN_FAULT": "diskfull@save=2"})
    if not (step_dir(run, 4) / "COMMITTED").is_file() or list((run / "checkpoints").glob(".tmp-*")):
        out.lost.append("the previous checkpoint was not kept, or a partial one was left")
    return out


# -- the first hour as a user (issue 26) ---------------------------------------------------------------
_USER_CODE = """
import torch
from torch import nn


def build(width=16, classes=4):
    return nn.Sequential(nn.Linear(16, width), nn.ReLU(), nn.Linear(width, classes))


def frozen():
    m = build()
    for p in m.parameters():
        p.requires_grad_(False)
    return m


class Labels(torch.utils.data.Dataset):
    num_classes = 4

    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.randn(16), -1


def minus_one():
    return Labels(), None


def no_path():
    return Labels(), None
"""


def _user_run(tmp, *sets) -> Outcome:
    (tmp / "usercode.py").write_text(_USER_CODE)
    mod = tmp / "usercode.py"
    base = ["model.args={}", f"model.import={mod}:build", "data.args={num_samples: 128, features: 16, num_classes: 4}"]
    return _no_run_dir(proc(["train", "--quiet", *mlp_args(tmp / "run", 4, *base, *[s.replace("MOD", str(mod)) for s in sets])]),
                       tmp / "never")


for _label, _sets in [("a model of the wrong input width", ["data.args={num_samples: 128, features: 8, num_classes: 4}"]),
                      ("a model with no trainable parameters", ["model.import=MOD:frozen"]),
                      ("a dataset with label -1", ["data.import=MOD:minus_one", "data.name=digits", "data.args={}"]),
                      ("data.path for an imported factory without a path", ["data.import=MOD:no_path", "data.name=digits",
                                                                            "data.args={}", "data.path=somewhere"])]:
    def _first(tmp, sets=_sets):
        out = _user_run(tmp, *sets)
        if "does not require grad" in out.stderr or "mat1 and mat2" in out.stderr and "your code raised" not in out.stderr:
            out.lost.append("torch's message without the blame")
        return out
    case("firsthour", f"train: {_label}")(_first)


@case("firsthour", "train: data.args.num_classes=1")
def _(tmp):
    return _no_run_dir(cli(["train", "--quiet", *mlp_args(tmp / "run", 4, "data.args={num_samples: 64, features: 8, num_classes: 1}")]),
                       tmp / "run")


@case("firsthour", "config: a YAML alias bomb in model.args")
def _(tmp):
    from hardkit import alias_bomb

    (tmp / "bomb.yaml").write_text(alias_bomb())
    return _no_run_dir(proc(["train", tmp / "bomb.yaml", "--quiet", *mlp_args(tmp / "run", 4)], timeout=120), tmp / "run")


@case("firsthour", "plan memory: the default precision is one rubin train runs", expect=(0,))
def _(tmp):
    import typing

    from rubin.train.config import Config

    out = cli(["plan", "memory", "--params", "7e9", "--gpu", "H100-SXM", "--gpus", "8", "--json"])
    if out.code == 0 and json.loads(out.stdout)["setup"]["precision"] not in typing.get_args(Config.model_fields["precision"].annotation):
        out.lost.append("the planner's default is a precision train does not run")
    return out


def _cpu_summary(tmp) -> Path:
    (tmp / "run").mkdir()
    (tmp / "run" / "summary.json").write_text(json.dumps({"status": "completed", "samples_per_s": 900.0, "device": "cpu"}))
    return tmp / "run"


@case("firsthour", "plan cost --summary of a CPU run")
def _(tmp):
    return cli(["plan", "cost", "--summary", _cpu_summary(tmp), "--work", "1e6", "--prices", ROOT / "examples" / "prices.example.yaml"])


@case("firsthour", "plan project --summary of a CPU run")
def _(tmp):
    return cli(["plan", "project", "--summary", _cpu_summary(tmp), "--to", "H200"])


@case("firsthour", "bench --out in a missing folder")
def _(tmp):
    out = cli(["bench", "launch", "--out", tmp / "no" / "such" / "x.json", *_TINY])
    if (tmp / "no").exists():
        out.lost.append("the missing folders were created")
    return out


@case("firsthour", "bench --set for a suite that does not run")
def _(tmp):
    return cli(["bench", "launch", "--out", tmp / "x.json", *_TINY, "--set", "matmul.trials=3"])


@case("firsthour", "compare: a verdict on a contended file is marked", expect=(0, 3))
def _(tmp):
    doc = json.loads(results_file(tmp.parent).read_text())
    doc["quality"] = {"contended": ["launch"], "noisy": []}
    (tmp / "busy.json").write_text(json.dumps(doc))
    out = cli(["compare", results_file(tmp.parent), tmp / "busy.json", "--all"])
    if "measured under load" not in out.stdout:
        out.lost.append("the verdict on a contended input was not marked")
    return out


@case("firsthour", "bench tables at 80 columns keep every digit", expect=(0,))
def _(tmp):
    out = proc(["bench", "launch", "--out", tmp / "x.json", *_TINY], env={"COLUMNS": "80"})
    if "…" in out.stdout:
        out.lost.append("a figure was cut")
    return out


for _doc_what, _path in [("missing path", "nope"), ("file", "f")]:
    def _doctor(tmp, path=_path):
        (tmp / "f").write_text("x")
        return cli(["doctor", "--run-dir", tmp / path])
    case("firsthour", f"doctor --run-dir on a {_doc_what}")(_doctor)


@case("firsthour", "launch slurm on a CPU partition with accelerator=gpu")
def _(tmp):
    (tmp / "bin").mkdir()
    (tmp / "bin" / "sinfo").write_text("#!/bin/sh\necho '(null)'\n")
    (tmp / "bin" / "sinfo").chmod(0o755)
    (tmp / "c.yaml").write_text("run: {max_steps: 4}\nmodel: {name: mlp}\ndata: {name: synthetic}\n")
    old = os.environ["PATH"]
    os.environ["PATH"] = f"{tmp / 'bin'}{os.pathsep}{old}"
    try:
        out = cli(["launch", "slurm", tmp / "c.yaml", "--dry-run", "--set", "launch.accelerator=gpu"])
    finally:
        os.environ["PATH"] = old
    if "<= 0" in out.stderr:
        out.lost.append("the meaningless gpus_per_node <= 0 advice")
    return out


def _unprivileged(args) -> Outcome:
    from hardkit import unprivileged

    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))
    p = subprocess.run(unprivileged([sys.executable, "-m", "rubin", *map(str, args)]), capture_output=True, text=True,
                       timeout=600, env=env, stdin=subprocess.DEVNULL)
    return Outcome(p.returncode, p.stdout, p.stderr)


for _action in ("verify", "list"):
    def _unreadable(tmp, action=_action):
        run = tmp / "run"
        shutil.copytree(crashed_run(tmp.parent), run, symlinks=True)
        (run / "checkpoints").chmod(0)
        try:
            return _unprivileged(["checkpoint", action, run])
        finally:
            (run / "checkpoints").chmod(0o755)
    case("firsthour", f"checkpoint {_action} on an unreadable checkpoints folder")(_unreadable)


@case("firsthour", "train with an unreadable old checkpoint: quarantined, not trashed", expect=(0,))
def _(tmp):
    run = tmp / "run"
    shutil.copytree(crashed_run(tmp.parent), run, symlinks=True)
    step_dir(run, 4).chmod(0)
    q = run / "checkpoints" / "quarantine" / "step-00000004"
    try:
        out = _unprivileged(["train", "--quiet", *mlp_args(run, 12, "checkpoint.keep_last=1")])
    finally:
        for p in (step_dir(run, 4), q):
            if p.exists():
                p.chmod(0o755)
    if not q.is_dir() or list((run / "checkpoints").glob(".trash-*")):
        out.lost.append("the unreadable checkpoint was not kept in quarantine/")
    return out


for _label, _how, _needle in [("model.pt is a FIFO", lambda s: ((s / "model.pt").unlink(), os.mkfifo(s / "model.pt")), "a FIFO"),
                              ("model.pt links to /dev/zero", lambda s: ((s / "model.pt").unlink(),
                                                                         (s / "model.pt").symlink_to("/dev/zero")),
                               "a character device"),
                              ("a folder renamed to another step", lambda s: s.rename(s.parent / "step-00000015"),
                               "holds step 8 but is named step-00000015")]:
    def _named(tmp, how=_how, needle=_needle):
        run = tmp / "run"
        shutil.copytree(crashed_run(tmp.parent), run, symlinks=True)
        how(step_dir(run, 8))
        out = cli(["checkpoint", "verify", run])
        if needle not in out.stdout:
            out.lost.append(f"the reason does not say {needle!r}")
        return out
    case("firsthour", f"verify names it: {_label}", expect=(3,))(_named)


@case("firsthour", "W&B online without an API key: one line", expect=(1,))
def _(tmp):
    env = {"WANDB_MODE": "online", "WANDB_API_KEY": "", "HOME": str(tmp), "WANDB_DIR": str(tmp)}
    return proc(["train", "--quiet", *mlp_args(tmp / "run", 2, "telemetry.sinks=[jsonl, wandb]")], env=env, timeout=300)


@case("firsthour", "W&B offline: no secret in what it would upload", expect=(0,))
def _(tmp):
    run = tmp / "run"
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "HOME": str(tmp)}
    out = proc(["train", "--quiet", *mlp_args(run, 4, "telemetry.sinks=[jsonl, wandb]", "run.name=x-hf_abcdefghijklmnopqrstuvwxyz0123")],
               env=env, timeout=300)
    files = list((run / "wandb").rglob("*.wandb")) if (run / "wandb").exists() else []
    if not files:
        out.lost.append("no offline W&B run was written")
    if any(b"hf_abcdefghijklmnopqrstuvwxyz0123" in p.read_bytes() for p in files):
        out.lost.append("the token went into the W&B run")
    return out


@case("firsthour", "launch local with a typo in model.args: one line, no torchrun")
def _(tmp):
    (tmp / "c.yaml").write_text(f"run: {{max_steps: 4, dir: {tmp / 'run'}}}\nmodel: {{name: mlp}}\ndata: {{name: synthetic}}\n"
                                "launch: {accelerator: cpu, gpus_per_node: 2}\n")
    out = proc(["launch", "local", tmp / "c.yaml", "--set", "model.args.hiddn=3"], timeout=300)
    if "ChildFailedError" in out.stderr or (tmp / "run").exists():
        out.lost.append("torchrun was started for a bad argument")
    return out


@case("firsthour", "bare torchrun with a typo: one line per node, and torchrun's summary names it", expect=(1,))
def _(tmp):
    from utils import torchrun_cmd

    # The ranks' own output goes to files (--redirects), judged like any rubin output; torchrun's own
    # traceback and summary are torchrun's, and are only checked to name rubin's line as the root cause.
    cmd = torchrun_cmd(2, ["train", "--quiet", *mlp_args(tmp / "run", 4, "optim.lrr=0.1")])
    cmd[3:3] = [f"--log-dir={tmp / 'logs'}", "--redirects=3"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300,
                       cwd=ROOT, stdin=subprocess.DEVNULL)
    ranks = "".join(f.read_text() for f in sorted((tmp / "logs").rglob("stderr.log")))
    out = Outcome(p.returncode, "", ranks)
    line = next((ln for ln in ranks.splitlines() if ln.startswith("rubin: error:")), None)
    if line is None or f"traceback : {line}" not in p.stderr:
        out.lost.append("torchrun's summary does not name rubin's line as the root cause")
    if (tmp / "run").exists():
        out.lost.append("a run dir was made for bad input")
    return out


# -- runner -------------------------------------------------------------------------------------------
def judge(c: Case, out: Outcome) -> dict:
    internal = "internal error" in out.stderr
    tb = "Traceback" in out.stderr
    err_lines = [ln for ln in out.stderr.strip().splitlines() if ln.startswith("rubin: error:")]
    one_line = out.code in (0, 75) or len(err_lines) <= 1
    clean = out.code in c.expect and not internal and not tb and not out.lost and one_line
    return {"clean": clean, "internal": internal, "traceback": tb, "lost": bool(out.lost)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", help="comma-separated groups to run (default: all)")
    ap.add_argument("--match", help="only the cases whose name contains this text")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case")
    a = ap.parse_args()
    chosen = [c for c in CASES if (not a.groups or c.group in a.groups.split(",")) and (not a.match or a.match in c.name)]
    if a.list:
        for c in chosen:
            print(f"{c.group:12} {c.name}")
        print(f"{len(chosen)} cases")
        return 0
    groups: dict[str, dict] = {}
    failures = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rubin-adversarial-") as root:
        for i, c in enumerate(chosen):
            tmp = Path(root) / f"case-{i:03d}"
            tmp.mkdir()
            try:
                out = c.run(tmp)
            except Exception as err:  # noqa: BLE001 - a harness failure is reported, not fatal
                out = Outcome(-1, "", f"harness: {type(err).__name__}: {err}")
            v = judge(c, out)
            g = groups.setdefault(c.group, {"tried": 0, "clean": 0, "internal": 0, "traceback": 0, "lost": 0})
            g["tried"] += 1
            for k in ("clean", "internal", "traceback", "lost"):
                g[k] += int(v[k])
            if not v["clean"]:
                failures.append((c, out))
            if a.verbose or not v["clean"]:
                print(f"[{'ok' if v['clean'] else 'FAIL'}] {c.group}: {c.name} -> exit {out.code}"
                      + (f"; {out.lost}" if out.lost else ""), flush=True)
    print(f"\n{'group':12} {'tried':>6} {'clean':>6} {'internal':>9} {'traceback':>10} {'lost':>5}")
    total = {"tried": 0, "clean": 0, "internal": 0, "traceback": 0, "lost": 0}
    for name, g in groups.items():
        print(f"{name:12} {g['tried']:>6} {g['clean']:>6} {g['internal']:>9} {g['traceback']:>10} {g['lost']:>5}")
        for k in total:
            total[k] += g[k]
    print(f"{'total':12} {total['tried']:>6} {total['clean']:>6} {total['internal']:>9} {total['traceback']:>10} {total['lost']:>5}")
    print(f"({time.monotonic() - t0:.0f} s)")
    for c, out in failures:
        tail = (out.stderr.strip().splitlines() or [""])[-1][:300]
        print(f"  not clean: {c.group}: {c.name}: exit {out.code} (expected {c.expect}) {out.lost or ''} {tail}")
        if a.verbose:
            print(out.stderr[-3000:])
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
