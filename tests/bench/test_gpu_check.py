"""scripts/gpu-smoke.sh, scripts/gpu-check.sh and scripts/gpu_check.py: budgets, the step runner, the figures.

The gathering is tested on files recorded on a real H200; both scripts run CPU-sized (slow), where the
test checks that every step ran, never how long one took (a CPU box under load is no GPU's clock)."""

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

SCRIPTS = {"smoke": ROOT / "scripts" / "gpu-smoke.sh", "full": ROOT / "scripts" / "gpu-check.sh"}


def _plan(script: Path) -> dict:
    """The script's declared limit and plan, and each step's kind and budget, from its step/extra/needs lines."""
    text = script.read_text()
    steps = {}
    for line in text.splitlines():
        m = re.match(r"^(step|extra) (\S+)\s+(\d+) ", line) or re.match(r"^needs \S+\s+(step|extra) (\S+)\s+(\d+) ", line)
        if m:
            steps[m.group(2)] = (m.group(1), int(m.group(3)))
    limit = int(re.search(r"^LIMIT_S=(\d+)$", text, re.M).group(1))
    planned = int(re.search(r"^PLANNED_S=(\d+)$", text, re.M).group(1))
    return {"limit": limit, "planned": planned, "steps": steps}


@pytest.mark.parametrize("run, limit", [("smoke", 240), ("full", 420)])
def test_the_plan_leaves_at_least_15_percent_of_the_limit_over(run, limit):
    plan = _plan(SCRIPTS[run])
    assert plan["limit"] == limit
    assert sum(b for kind, b in plan["steps"].values() if kind == "step") == plan["planned"]  # declared = the steps' sum
    assert plan["planned"] <= 0.85 * limit


def test_the_smoke_run_holds_what_the_issue_asks_first():
    steps = _plan(SCRIPTS["smoke"])["steps"]
    assert list(steps) == ["wheels", "pytest-nccl-1rank.txt", "ac-compile", "gpt124m", "fp8-train", "resume-pair"]


def _scratch(tmp_path, rows: list[str], figures: list[dict]) -> Path:
    s = tmp_path / "scratch"
    s.mkdir()
    (s / "steps.tsv").write_text("".join(r + "\n" for r in rows))
    (s / "figures.jsonl").write_text("".join(json.dumps(f) + "\n" for f in figures))
    return s


def _derived(tmp_path, name: str, fixture: Path) -> list[dict]:
    target = tmp_path / "derive" / name
    target.parent.mkdir(exist_ok=True)
    shutil.copy(fixture, target.with_name("bench-matmul.json") if name == "bench-matmul.txt" else target)
    target.touch()
    return gpu_check.derive(target)


def test_recorded_h200_files_give_gaps_for_ambitions_and_fail_only_on_checks(tmp_path):
    figs = (_derived(tmp_path, "doctor.json", FIX / "doctor" / "h200_doctor.json")
            + _derived(tmp_path, "bench-matmul.txt", FIX / "bench" / "h200_bench_matmul.json")
            + gpu_check.train({"status": "completed", "final_loss": 9.0, "tokens_per_s": 386402.4, "mfu": 0.334,
                               "compile": {"frames": 1, "graphs": 1, "fallback": None, "compile_s": 41.0},
                               "fused_loss": True, "fused_loss_impl": "rubin"}, "GPT-124M", compiled=True, fused=True,
                              mfu=True, compile_target=60))
    rows = ["doctor.json\tok\t6\t8\t8\texit 0", "bench-matmul.txt\tok\t20\t22\t24\texit 0",
            "gpu-facts\tskipped\t0\t4\t0\tmissing nvidia-smi"]
    out = tmp_path / "out"
    assert gpu_check.main(["gather", str(_scratch(tmp_path, rows, figs)), str(out), "--run", "full", "--limit", "420",
                           "--planned", "357", "--total", "300"]) == 0  # only gaps: the run held
    summary = json.loads((out / "summary.json").read_text())
    by = {f["figure"]: f for f in summary["figures"]}
    assert by["doctor wall"]["value"] == 5.86 and by["doctor wall"]["kind"] == "gap" and by["doctor wall"]["ok"] is False
    assert by["matmul bf16 MAMF cuda:0"]["value"] == 771.2
    assert by["GPT-124M MFU"]["ok"] is False and by["GPT-124M MFU"]["kind"] == "gap"
    assert set(summary["gaps"]) == {"doctor wall", "GPT-124M MFU"}
    assert summary["failed_checks"] == [] and summary["skipped"] == {"gpu-facts": "missing nvidia-smi"}
    assert summary["reserve_s"] == 63 and sorted(p.name for p in out.iterdir()) == ["figures.txt", "summary.json"]
    text = (out / "figures.txt").read_text()
    assert "GAP  doctor wall: 5.86 s (target <= 3)" in text and "exit 0" in text.splitlines()[0]


def test_a_failed_test_fails_the_run_and_a_skip_on_one_gpu_does_not(tmp_path):
    figs = _derived(tmp_path, "pytest-gpu.txt", FIX / "bench" / "h200_pytest_gpu.txt")  # 9 passed, 1 failed, 1 skipped
    by = {f["figure"]: f for f in figs}
    assert by["pytest-gpu failed"]["kind"] == "check" and by["pytest-gpu failed"]["value"] == 1
    assert by["pytest-gpu skipped"]["kind"] == "info" and by["pytest-gpu skipped"]["value"] == 1  # the 2-GPU NCCL test
    err = ["ERROR: something", "AssertionError: 517441292.0 == 561093416.0"]
    scratch = _scratch(tmp_path, ["pytest-gpu.txt\tfailed\t37\t40\t40\texit 1"], figs)
    (scratch / "pytest-gpu.txt.stderr").write_text("\n".join(err) + "\n")
    out = tmp_path / "out"
    assert gpu_check.main(["gather", str(scratch), str(out), "--run", "full", "--limit", "420", "--planned", "357",
                           "--total", "50"]) == 3
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failed_checks"] == ["pytest-gpu failed"] and summary["failed_steps"] == ["pytest-gpu.txt"]
    assert summary["steps"][0]["stderr_tail"] == err  # the cause outlives the scratch folder


def test_a_later_line_of_a_figure_supersedes_the_earlier_one(tmp_path):
    rounds = [{"figure": "peers rubin speed vs plain", "value": v, "unit": "x", "target": ">= 1.0", "kind": "gap",
               "ok": v >= 1} for v in (0.9, 1.02)]
    figs = gpu_check.figures(_scratch(tmp_path, [], rounds))
    assert [f["value"] for f in figs] == [1.02]


def test_gather_without_a_run_is_bad_input(tmp_path, capsys):
    assert gpu_check.main(["gather", str(tmp_path), str(tmp_path / "out"), "--run", "smoke", "--limit", "240",
                           "--planned", "202", "--total", "1"]) == 2
    assert "has no steps.tsv" in capsys.readouterr().err


def test_the_runner_keeps_figures_of_a_cut_step_and_passes_unused_time_on(tmp_path):
    """A step past its limit is a timeout whose figure, printed before, survives in OUT/figures.txt; a step
    that ends early leaves its time to the next; an extra runs only when unused planned time covers it."""
    figure = {"figure": "measured before the cut", "value": 1, "unit": "", "target": "-", "kind": "info", "ok": None}
    (tmp_path / "measure.sh").write_text(f"echo '{json.dumps(figure)}'\nexec sleep 60\n")  # cut by its limit
    script = tmp_path / "mini.sh"
    script.write_text(f"""source {ROOT}/scripts/gpu_check_lib.sh
LIMIT_S=100
PLANNED_S=43
step cut 2 bash {tmp_path / "measure.sh"}
step quick 30 true
step next 11 true
extra big 1000 true
finish smoke
""")
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    env = {k: v for k, v in os.environ.items() if k != "GPU_CHECK_CPU"}
    p = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120,
                       env=dict(env, OUT=str(out), SCRATCH=str(scratch), PY=sys.executable))
    assert p.returncode == 3, p.stdout + p.stderr  # a step timed out
    summary = json.loads((out / "summary.json").read_text())
    steps = {s["name"]: s for s in summary["steps"]}
    assert steps["cut"]["status"] == "timeout" and steps["cut"]["limit_s"] == 2
    assert "measured before the cut" in {f["figure"] for f in summary["figures"]}
    assert steps["next"]["limit_s"] > 11  # it got what "quick" left unused
    assert steps["big"]["status"] == "skipped" and "needs 1000 s" in steps["big"]["note"]
    assert summary["failed_steps"] == ["cut"]


def _cpu_run(tmp_path, run: str) -> tuple[subprocess.CompletedProcess, dict, Path]:
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    env = dict(os.environ, GPU_CHECK_CPU="1", OUT=str(out), SCRATCH=str(scratch), PY=sys.executable,
               WHEELS=str(tmp_path / "no-wheels"))
    p = subprocess.run(["bash", str(SCRIPTS[run])], capture_output=True, text=True, env=env, timeout=1500)
    summary = json.loads((out / "summary.json").read_text())
    return p, summary, out


def _every_step_ran(summary: dict, run: str, scratch_hint: str) -> dict:
    steps = {s["name"]: s for s in summary["steps"]}
    assert list(steps) == list(_plan(SCRIPTS[run])["steps"])
    no_driver = {"gpu-facts"} if shutil.which("nvidia-smi") is None else set()
    assert {n for n, s in steps.items() if s["status"] == "skipped"} <= {"wheels", *no_driver}
    assert "no-wheels" in steps["wheels"]["note"]
    for name, s in steps.items():
        if s["status"] != "skipped":
            assert s["status"] == "ok", (name, s, scratch_hint)
    assert summary["failed_checks"] == [] and summary["exit"] == 0
    return steps


@pytest.mark.slow
@pytest.mark.timeout(1600)
def test_cpu_sized_smoke_run_runs_every_step(tmp_path):
    p, summary, out = _cpu_run(tmp_path, "smoke")
    _every_step_ran(summary, "smoke", p.stderr[-3000:])
    assert p.returncode == 0, p.stderr[-3000:]
    figs = {f["figure"]: f for f in summary["figures"]}
    assert figs["pytest-nccl-1rank passed"]["value"] == 2  # the 1-rank ddp and fsdp runs, over gloo here
    assert figs["ac-compile: compile traced the blocks with activation checkpointing (frames, no fallback)"]["ok"]
    assert figs["GPT-tiny: fused loss on"]["ok"] and figs["resume after SIGKILL, augment, 0 workers, cpu: digest equal"]["ok"]
    assert sorted(x.name for x in out.iterdir()) == ["figures.txt", "summary.json"]  # the rest stayed in the scratch folder


@pytest.mark.slow
@pytest.mark.timeout(1600)
def test_cpu_sized_full_run_runs_every_step(tmp_path):
    p, summary, out = _cpu_run(tmp_path, "full")
    _every_step_ran(summary, "full", p.stderr[-3000:])
    assert p.returncode == 0, p.stderr[-3000:]
    figs = {f["figure"] for f in summary["figures"]}
    assert {"doctor wall", "doctor-deep wall", "pytest-gpu failed", "gpu-full total", "GPT-124M cold MFU",
            "GPT-124M profile verdict", "peers rubin speed vs plain", "fp8 llama bf16 tokens/s"} <= figs
    assert any(f.startswith("bench-vs-plain fp32 matmul") for f in figs)
    assert any(f.startswith("plan memory GPT-small") for f in figs)
    assert any(f.startswith("matmul_clocks fp32 256^3 sustained/burst") for f in figs)
    assert any(f.startswith("fused loss fused gpt peak") for f in figs)
    assert sorted(x.name for x in out.iterdir()) == ["figures.txt", "summary.json"]
