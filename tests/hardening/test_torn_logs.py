"""Issue 16 items 8-9: JSONL lines are all-or-nothing, a full disk while logging is one clear line,
and damaged run-dir files never block a resume."""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import subprocess
import sys

import pytest
from hardkit import events, mlp_args, rubin, summary

from rubin.errors import RubinError
from rubin.runs import RunDir, append_line, read_jsonl

LIMIT = 20000  # bytes per file: above every checkpoint file of the tiny run, reached by metrics.jsonl near step 60


def _limited(limit: int):
    def setup():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG from write() instead of a signal

    return setup


def _train_with_file_limit(run, every: int) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "rubin", "train", "--quiet", *mlp_args(run, 100, every=every)],
                          capture_output=True, text=True, env=env, timeout=600, preexec_fn=_limited(LIMIT))


def _all_lines_whole(path) -> int:
    raw = path.read_bytes()
    assert raw.endswith(b"\n"), "a partial line survived"
    for line in raw.splitlines():
        json.loads(line)
    return len(raw.splitlines())


def test_disk_full_while_logging_keeps_lines_whole_and_says_the_checkpoint_is_kept(tmp_path):
    run = tmp_path / "run"
    p = _train_with_file_limit(run, every=20)
    assert p.returncode == 1, p.stderr[-2000:]
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert f"could not write {run / 'metrics.jsonl'}: disk full" in err[0]
    assert "the previous committed checkpoint is kept" in err[0] and "free space" in err[0]
    logged = _all_lines_whole(run / "metrics.jsonl")
    assert 40 < logged < 100
    p = rubin(["train", "--quiet", *mlp_args(run, 100, every=20)])  # room again: resume from the last checkpoint
    assert p.returncode == 0, p.stderr[-2000:]
    assert summary(run)["steps"] == 100 and [e["step"] for e in events(run) if e["kind"] == "resume"][-1] in (40, 60)


def test_disk_full_before_any_checkpoint_does_not_claim_one(tmp_path):
    run = tmp_path / "run"
    p = _train_with_file_limit(run, every=1000)
    assert p.returncode == 1
    assert "could not write" in p.stderr and "disk full" in p.stderr and "checkpoint is kept" not in p.stderr
    _all_lines_whole(run / "metrics.jsonl")


def test_a_short_write_is_cut_back(tmp_path, monkeypatch):
    path = tmp_path / "m.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        append_line(fd, b'{"step":1}\n', path)
        real = os.write

        def half(f, data):  # the kernel wrote part of the line, then the disk filled
            return real(f, data[: len(data) // 2])

        monkeypatch.setattr(os, "write", half)
        with pytest.raises(RubinError, match="disk full.*the line was not written"):
            append_line(fd, b'{"step":2,"loss":1.0}\n', path)
        monkeypatch.setattr(os, "write", real)
        append_line(fd, b'{"step":3}\n', path)
    finally:
        os.close(fd)
    assert path.read_bytes() == b'{"step":1}\n{"step":3}\n'


def test_enospc_on_write_is_cut_back(tmp_path, monkeypatch):
    path = tmp_path / "m.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        append_line(fd, b'{"step":1}\n', path)

        def full(f, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "write", full)
        with pytest.raises(RubinError, match="disk full"):
            append_line(fd, b'{"step":2}\n', path)
    finally:
        os.close(fd)
    assert path.read_bytes() == b'{"step":1}\n'


def test_readers_skip_and_report_damaged_lines(tmp_path):
    p = tmp_path / "events.jsonl"
    p.write_bytes(b'{"kind":"start"}\n{"kind":"sa\xff\xfeved"}\n{"kind": "end"\n[1,2]\n{"kind":"end"}\n')
    problems = []
    rows = read_jsonl(p, problems)
    assert [r["kind"] for r in rows] == ["start", "end"]
    assert len(problems) == 3 and all("skipped an invalid line" in x for x in problems)


def test_non_utf8_bytes_in_events_never_block_resume(crashed_at_9):
    run = crashed_at_9  # a 12-step run killed after step 8
    with open(run / "events.jsonl", "ab") as f:
        f.write(b'{"kind":"warning","message":"\xff\xfe\x80 garbage"}\n\xc3\x28 torn\n')
    with open(run / "metrics.jsonl", "ab") as f:
        f.write(b'{"step": 9, "loss": 1.0, "tim')  # a torn last line, as an old writer could leave
    p = rubin(["train", *mlp_args(run, 12)])
    assert p.returncode == 0, p.stderr[-2000:]
    assert "warning: 3 damaged line(s) in the run dir's logs are skipped" in p.stderr
    assert summary(run)["steps"] == 12
    assert [e["step"] for e in events(run) if e["kind"] == "resume"] == [8]
    steps = [r["step"] for r in RunDir(run).metrics()]
    assert steps[-4:] == [9, 10, 11, 12]  # the first line after the torn one was not glued to it
