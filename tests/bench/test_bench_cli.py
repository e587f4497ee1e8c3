"""``rubin bench`` end to end, in-process, on CPU."""

import json
import subprocess
import sys

import pytest
from utils import invoke

from rubin.bench import results


@pytest.mark.slow
def test_quick_preset_end_to_end(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "r.json"
    res = invoke(["bench", "all", "--quick", "--out", out, "--json"])
    doc = results.load(out)  # written, and valid against the schema
    assert json.loads(res.stdout)["schema_version"] == results.SCHEMA_VERSION
    b = doc["benchmarks"]
    assert list(b) == ["matmul", "membw", "h2d", "launch", "collectives", "io", "model"]
    for name in ("matmul", "membw", "h2d", "launch", "collectives", "io"):
        assert b[name]["status"] == "ok", (name, b[name].get("error"))
        assert b[name]["rows"] and b[name]["method"] and b[name]["wall_s"] > 0
    coll = b["collectives"]["rows"]
    assert {r["op"] for r in coll} == {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"}
    assert all(r["verified"] and r["ranks"] == 2 for r in coll)
    assert b["matmul"]["summary"]["cpu"]["fp32"]["mamf_tflops"] > 0
    assert b["model"]["status"] == "ok" and res.exit_code == 0
    assert {r["workload"] for r in b["model"]["rows"]} == {"vit", "gpt124m"}
    assert (tmp_path / "r.png").exists()  # matplotlib is in the test extra
    assert list(tmp_path.glob(".rubin-bench-*")) == []  # io and model scratch is cleaned up


def test_one_suite_prints_tables_and_writes_the_file(tmp_path):
    out = tmp_path / "launch.json"
    res = invoke(["bench", "launch", "--quick", "--out", out, "--set", "launch.kernels=10", "--no-plot"])
    assert res.exit_code == 0, res.stderr
    assert "kernel launch latency" in res.stdout and str(out) in res.stdout.replace("\n", "")
    doc = results.load(out)
    assert doc["suites"] == ["launch"] and doc["benchmarks"]["launch"]["params"]["kernels"] == 10


def test_plain_progress_lines_when_not_a_tty(tmp_path):
    res = invoke(["bench", "launch", "--quick", "--out", tmp_path / "x.json", "--no-plot"])
    assert "rubin bench: launch ok" in res.stderr


@pytest.mark.parametrize(
    "args,needle",
    [
        (["bench", "matmull"], "did you mean 'matmul'"),
        (["bench", "matmul", "--set", "matmul"], "expected SUITE.KEY=VALUE"),
        (["bench", "matmul", "--set", "matmal.trials=3"], "did you mean 'matmul'"),
        (["bench", "collectives", "--ranks", "1"], "--ranks=1"),
        (["bench", "io", "--io-dir", "/nonexistent/dir"], "--io-dir='/nonexistent/dir'"),
        (["bench", "--gpu", "H20O"], "did you mean 'H200'"),
    ],
)
def test_bad_arguments_are_one_line_usage_errors(args, needle, tmp_path):
    res = invoke([*args, "--out", tmp_path / "x.json"])
    assert res.exit_code == 2
    assert needle in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_list_gpus_shows_the_catalog():
    res = invoke(["bench", "--list-gpus", "--json"])
    assert res.exit_code == 0
    keys = [g["key"] for g in json.loads(res.stdout)["gpus"]]
    assert {"H200", "GB300", "B300", "VR200", "L40S", "L4", "A10"} <= set(keys)
    res = invoke(["bench", "--gpu", "vr200"])
    assert res.exit_code == 0 and "PRELIMINARY" in res.stdout and "10.7" in res.stdout and "HBM4" in res.stdout
    res = invoke(["bench", "--list-gpus"])
    assert "VR200 (prelim.)" in res.stdout


def test_help_does_not_import_torch():
    code = ("import sys; from rubin.cli import main; "
            "[main([c, '--help']) for c in ('bench', 'compare')]; "
            "print('TORCH' if 'torch' in sys.modules else 'NOTORCH', file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stderr.strip().splitlines()[-1] == "NOTORCH"
    assert "--quick" in out.stdout and "--rules" in out.stdout


def test_set_merges_nested_params_and_rejects_unknown_keys(tmp_path):
    out = tmp_path / "io.json"
    res = invoke(["bench", "io", "--quick", "--out", out, "--no-plot", "--io-dir", tmp_path,
                  "--set", "io.bytes=1048576", "--set", "io.dataloader={batches: 2, trials: 2}"])
    assert res.exit_code == 0, res.stderr
    params = results.load(out)["benchmarks"]["io"]["params"]
    assert params["bytes"] == 2**20 and params["dataloader"]["batches"] == 2
    assert params["dataloader"]["batch_size"] == 64  # the rest of the preset is kept
    res = invoke(["bench", "io", "--quick", "--out", out, "--set", "io.byts=1"])
    assert res.exit_code == 2 and "did you mean 'bytes'" in res.stderr


def test_without_matplotlib_the_plot_is_skipped_with_a_notice(tmp_path, monkeypatch):
    from rubin.bench import plots

    monkeypatch.setattr(plots, "available", lambda: False)
    res = invoke(["bench", "launch", "--quick", "--out", tmp_path / "x.json", "--set", "launch.kernels=5"])
    assert res.exit_code == 0 and "matplotlib is not installed" in res.stderr
    assert not list(tmp_path.glob("*.png")) and (tmp_path / "x.json").exists()


def test_plot_from_the_recorded_fixture_as_svg(tmp_path):
    from pathlib import Path

    from rubin.bench import plots

    doc = results.load(Path(__file__).resolve().parents[1] / "fixtures" / "bench" / "cpu-quick.json")
    path = plots.write(doc, tmp_path / "bw.svg")
    text = path.read_text()
    assert text.startswith("<?xml") and "busbw" in text and "all_reduce" in text


def test_out_in_a_missing_folder_is_refused_and_nothing_is_created(tmp_path):
    res = invoke(["bench", "launch", "--quick", "--no-plot", "--out", tmp_path / "no" / "such" / "x.json"])
    assert res.exit_code == 2 and "does not exist" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "no").exists()


def test_set_for_a_suite_that_does_not_run_is_refused(tmp_path):
    res = invoke(["bench", "launch", "--quick", "--no-plot", "--out", tmp_path / "x.json", "--set", "matmul.trials=3"])
    assert res.exit_code == 2 and "--set matmul.* is for a suite this command does not run" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.json").exists()
