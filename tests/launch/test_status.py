"""`python -m rubin.launch.status`: how this attempt of a run ended, from summary.json, never from an
earlier attempt's summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from rubin.launch.status import attempt_status


def _summary(run_dir, status, age_s=0.0):
    p = run_dir / "summary.json"
    p.write_text(json.dumps({"status": status, "steps": 7}))
    t = time.time() - age_s
    os.utime(p, (t, t))


def test_reads_this_attempts_status(tmp_path):
    _summary(tmp_path, "preempted")
    assert attempt_status(tmp_path, since=time.time() - 5) == "preempted"
    assert attempt_status(tmp_path) == "preempted"


def test_an_earlier_attempts_summary_does_not_count(tmp_path):
    _summary(tmp_path, "preempted", age_s=600)  # the previous attempt was preempted; this one crashed early
    assert attempt_status(tmp_path, since=time.time() - 60) == "none"


def test_missing_torn_or_odd_summaries_are_none(tmp_path):
    assert attempt_status(tmp_path) == "none"
    (tmp_path / "summary.json").write_text('{"status": "compl')
    assert attempt_status(tmp_path) == "none"
    (tmp_path / "summary.json").write_text('["completed"]')
    assert attempt_status(tmp_path) == "none"
    (tmp_path / "summary.json").write_text('{"status": "x; rm -rf /"}')
    assert attempt_status(tmp_path) == "none"  # the job script puts this word in a shell case: words only


def test_command_line(tmp_path):
    _summary(tmp_path, "completed")
    p = subprocess.run([sys.executable, "-m", "rubin.launch.status", str(tmp_path), "--since", str(time.time() - 30)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "completed"
