"""Issue 26 item 6: the load around each benchmark is recorded, noisy figures are flagged, compare marks
verdicts built on them, and tables keep every digit at 80 columns."""

import io
import os
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

from rubin.bench import compare, load, render, results

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / "cpu-quick.json"


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_other_processes_busy_on_every_cpu_make_a_benchmark_contended():
    meter = load.Meter()
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        deadline = time.monotonic() + 60
        while sum(_cpu_s(p.pid) for p in spin) < 1.0 * len(spin) and time.monotonic() < deadline:
            time.sleep(0.05)
        got = meter.read()  # before the spinners are reaped: their time is not this process's
    finally:
        for p in spin:
            p.kill()
            p.wait()
    assert got["contended"] is True and got["others_cpu_share"] > load.CONTENDED_SHARE
    assert got["cpus"] == os.cpu_count() and len(got["load_avg_1m"]) == 2


def _doc_with(spread: float, contended: bool = False) -> dict:
    doc = results.load(FIXTURE)
    row = doc["benchmarks"]["launch"]["rows"][0]
    row["wall_us"] = {"median": 10.0, "min": 1.0, "max": 100.0, "ci95": [10.0 - 5 * spread, 10.0 + 5 * spread], "n": 9}
    doc["benchmarks"]["launch"]["load"] = {"contended": contended}
    doc["quality"] = load.quality(doc)
    return doc


def test_a_wide_interval_is_listed_as_noisy_and_compare_marks_the_verdict():
    noisy, clean = _doc_with(spread=1.0), _doc_with(spread=0.01)
    assert "launch/cpu/wall_us" in [n["metric"] for n in noisy["quality"]["noisy"]]
    assert "launch/cpu/wall_us" not in [n["metric"] for n in clean["quality"]["noisy"]]
    rules = compare.load_rules(None)
    rep = compare.compare(clean, noisy, rules)
    row = next(r for r in rep["metrics"] if r["metric"] == "launch/cpu/wall_us")
    assert row["caveats"] == ["new figure is noisy"] and rep["weak_verdicts"] >= 1
    assert any("95% interval wider than 50%" in c for c in rep["caveats"])


def test_a_contended_benchmark_marks_every_verdict_on_it(tmp_path):
    from utils import invoke

    base, new = tmp_path / "a.json", tmp_path / "b.json"
    results.save(_doc_with(spread=0.01), base)
    results.save(_doc_with(spread=0.01, contended=True), new)
    res = invoke(["compare", base, new, "--all", "--json"])
    import json

    rep = json.loads(res.stdout)
    launch = [r for r in rep["metrics"] if r["metric"].startswith("launch/")]
    assert launch and all("new measured under load" in r["caveats"] for r in launch)
    res = invoke(["compare", base, new])
    assert "measured under load from other processes (launch)" in res.stdout
    assert "rest on noisy or contended figures" in res.stdout


def test_tables_keep_every_digit_at_80_columns():
    doc = results.load(FIXTURE)
    buf = io.StringIO()
    console = Console(file=buf, width=80)
    for t in render.tables(doc, width=80):
        console.print(t)
    out = buf.getvalue()
    assert max(len(line) for line in out.splitlines()) <= 80 and "…" not in out
    mm = doc["benchmarks"]["matmul"]["rows"][0]["tflops"]
    assert render._ci(mm) in out  # e.g. 0.000839 [0.000763, 0.000887], whole
    for r in doc["benchmarks"]["model"]["rows"]:
        assert render._ci(r["samples_per_s"], 1) in out
    flat = " ".join(out.split())  # captions wrap
    assert "MFU, MAMF-MFU, J/sample (widen the terminal, or --json)" in flat  # dropped whole, and named


def test_another_process_on_the_gpu_makes_a_benchmark_contended():
    from rubin.platform import nvml_fake

    def recording(pids):
        return {"devices": [{"nvmlDeviceGetName": "NVIDIA H200", "nvmlDeviceGetUtilizationRates": {"gpu": 97, "memory": 40},
                             "nvmlDeviceGetComputeRunningProcesses": [{"pid": p, "usedGpuMemory": 1 << 30} for p in pids]}]}

    with nvml_fake.install(recording([os.getpid(), 2**22 + 7])):
        busy = load.Meter().read()
    with nvml_fake.install(recording([os.getpid()])):
        alone = load.Meter().read()
    assert busy["gpus"] == [{"index": 0, "other_processes": 1, "util_pct": 97}] and busy["contended"] is True
    assert alone["gpus"] == [{"index": 0, "other_processes": 0, "util_pct": 97}]


def test_bench_warns_and_records_when_it_ran_under_load(tmp_path, monkeypatch):
    from utils import invoke

    busy = {"cpus": 2, "load_avg_1m": [3.1, 3.4], "others_cpu_share": 0.8, "gpus": None, "contended": True}
    monkeypatch.setattr(load.Meter, "read", lambda self: dict(busy))
    out = tmp_path / "x.json"
    r = invoke(["bench", "launch", "--quick", "--no-plot", "--out", out, "--set", "launch.kernels=5", "--set", "launch.trials=3"])
    assert r.exit_code == 0, r.stderr
    assert "warning: these results: measured under load from other processes (launch)" in r.stderr
    doc = results.load(out)
    assert doc["benchmarks"]["launch"]["load"]["others_cpu_share"] == 0.8 and doc["quality"]["contended"] == ["launch"]
