"""scripts/gpu-check.sh and scripts/gpu_check.py: budgets, skipped steps, and the summary of a run.

The gathering is tested on the files recorded on a real H200; the whole script runs CPU-sized (slow)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_check  # noqa: E402

RESERVED = {"gpu-peers.jsonl": "benchmarks/gpu_peers.py", "fused-loss-memory.jsonl": "benchmarks/fused_loss_memory.py",
            "fp8-llama.jsonl": "benchmarks/fp8_llama.py", "profile.json": "src/rubin/cli/profile.py"}
SPEED = {*RESERVED, "compile-warm.json"}  # the GPU-speed and profile figures


def _budgets() -> dict[str, int]:
    """Each step's budget as the script declares it (step/needs lines)."""
    out = {}
    for line in (ROOT / "scripts" / "gpu-check.sh").read_text().splitlines():
        m = re.match(r"^step (\S+)\s+(\d+) ", line) or re.match(r"^needs \S+\s+(\S+)\s+(\d+) ", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def test_step_budgets_sum_to_415_s_and_leave_275_s_to_the_speed_and_profile_steps():
    b = _budgets()
    assert SPEED <= set(b)
    assert sum(b.values()) == 415
    assert sum(b[k] for k in SPEED) == 275 and sum(v for k, v in b.items() if k not in SPEED) == 140


def test_summary_of_the_recorded_h200_files(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(FIX / "doctor" / "h200_doctor.json", out / "doctor.json")
    shutil.copy(FIX / "doctor" / "h200_doctor_deep.json", out / "doctor-deep.json")
    shutil.copy(FIX / "bench" / "h200_pytest_gpu.txt", out / "pytest-gpu.txt")
    shutil.copy(FIX / "bench" / "h200_bench_matmul.json", out / "bench-matmul.json")
    line = {"figure": "bench-vs-plain bf16 matmul 8192^3 rubin/plain", "value": 0.99, "unit": "x", "target": "0.97-1.03",
            "ok": True}
    (out / "bench-vs-plain.txt").write_text("a text line\n" + json.dumps(line) + "\n{not json\n")
    (out / "steps.tsv").write_text("doctor.json\tok\t6\t6\texit 0\npytest-gpu.txt\tfailed\t37\t50\texit 1\n"
                                   "bench-vs-plain.txt\tok\t9\t12\texit 0\n"
                                   "fp8-llama.txt\tskipped\t0\t70\tmissing benchmarks/fp8_llama.py\n")
    (out / "profile.json").write_text(json.dumps({"verdict": {"id": "launch-bound", "finding": "GPU idle"}}))
    rc = gpu_check.main([str(out), "--total", "52"])
    summary = json.loads((out / "summary.json").read_text())
    figs = {f["figure"]: f for f in summary["figures"]}
    assert rc == 3  # a step failed and figures missed their targets
    assert figs["doctor wall"]["value"] == 5.86 and figs["doctor wall"]["ok"] is False  # the recorded 5.9 s
    assert figs["doctor-deep wall"]["value"] == 17.72 and figs["doctor-deep wall"]["ok"] is True
    assert figs["gpu tests failed"]["value"] == 1 and figs["gpu tests skipped"]["value"] == 1
    assert figs["gpu tests passed"]["value"] == 9
    assert figs["matmul bf16 MAMF cuda:0"]["value"] == 771.2
    assert figs["bench-vs-plain bf16 matmul 8192^3 rubin/plain"]["source"] == "bench-vs-plain.txt"
    assert figs["GPT-124M profile verdict"]["value"] == "launch-bound"
    assert figs["gpu-check total"] == {**figs["gpu-check total"], "value": 52, "ok": True}
    assert summary["skipped"] == ["fp8-llama.txt"] and summary["failed"] == ["pytest-gpu.txt"]
    assert summary["steps"][3]["note"] == "missing benchmarks/fp8_llama.py"
    text = (out / "figures.txt").read_text()
    assert "MISS doctor wall: 5.86 s  (target <= 3)" in text and "fp8-llama.txt skipped 0/70s" in text


def test_gather_without_a_run_is_bad_input(tmp_path, capsys):
    assert gpu_check.main([str(tmp_path)]) == 2
    assert "has no steps.tsv" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(600)  # the script's own limit is 290 s CPU-sized; the subprocess gets 400
def test_cpu_mode_runs_every_step_within_its_budget(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, GPU_CHECK_CPU="1", OUT=str(out), PY=sys.executable, WHEELS=str(tmp_path / "no-wheels"))
    p = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check.sh")], capture_output=True, text=True, env=env,
                       timeout=400)
    assert p.returncode in (0, 3), p.stdout[-2000:] + p.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    steps = {s["name"]: s for s in summary["steps"]}
    assert list(steps) == list(_budgets())
    assert summary["total_s"] <= 300  # CPU-sized: under 5 minutes
    for name, file in RESERVED.items():
        if not (ROOT / file).exists():
            assert steps[name]["status"] == "skipped" and steps[name]["note"] == f"missing {file}"
    assert steps["wheels"]["status"] == "skipped" and "no-wheels" in steps["wheels"]["note"]
    no_driver = {"nvidia-smi.txt", "nvml-record.json"} if shutil.which("nvidia-smi") is None else set()
    assert {n for n, s in steps.items() if s["status"] == "skipped"} <= {"wheels", *no_driver, *RESERVED}
    for name, s in steps.items():  # the script's own functions (the profile and compile steps) included
        if s["status"] != "skipped":
            assert s["status"] == "ok", (name, s, (out / f"{name}.stderr").read_text()[-1500:])
    figs = {f["figure"] for f in summary["figures"]}
    assert {"doctor wall", "doctor-deep wall", "gpu tests failed", "gpu-check total"} <= figs
    assert any(f.startswith("bench-vs-plain fp32 matmul") for f in figs)
    assert any(f.startswith("plan memory GPT-small") for f in figs)
    assert any(f.startswith("matmul_clocks fp32 256^3 sustained/burst") for f in figs)
    assert any(f.startswith("matmul fp32 MAMF cpu") for f in figs)
    text = (out / "figures.txt").read_text()
    assert text.count("\n") >= len(summary["figures"]) + 1
    assert "peers speed vs plain" in text and "compile-warm.json" in text  # the speed figures, appended
