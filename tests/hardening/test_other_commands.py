"""Issue 16 item 14: bench and compare validate everything before the expensive part, never lose results,
and every command survives a reader that leaves early (``| head -1``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from utils import invoke

from rubin.bench import results


@pytest.fixture(scope="module")
def results_file(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "r.json"
    r = invoke(["bench", "launch", "--quick", "--out", out, "--no-plot", "--set", "launch.kernels=20", "--set", "launch.trials=3"])
    assert r.exit_code == 0, r.stderr
    return out


def test_out_pointing_at_a_directory_puts_the_results_inside_it(tmp_path):
    r = invoke(["bench", "launch", "--quick", "--out", tmp_path, "--no-plot", "--set", "launch.kernels=20", "--set", "launch.trials=3"])
    assert r.exit_code == 0, r.stderr
    saved = list(tmp_path.glob("rubin-bench-*.json"))
    assert len(saved) == 1 and f"results: {saved[0]}" in r.stdout.replace("\n", "")
    assert results.load(saved[0])["benchmarks"]["launch"]["status"] == "ok"


@pytest.mark.parametrize("args,needle", [
    (["--plot", "p.bmp"], "--plot='p.bmp' is not valid: a file ending in .png, .svg, .pdf"),
    (["--set", "matmul.trials=-1"], "--set matmul.trials=-1 is not valid: an integer >= 1"),
    (["--set", "launch.kernels=1.5"], "--set launch.kernels=1.5 is not valid: an integer >= 1"),
    (["--set", "matmul.dtypes=[]"], "--set matmul.dtypes=[] is not valid: a non-empty list"),
    (["--set", "matmul.trialz=3"], "(did you mean 'trials'?)"),
    (["--set", "matmul.trials=[1"], "is not valid YAML"),
    (["--out", "FILE/x.json"], "its folder cannot hold the results"),
])
def test_bad_bench_input_fails_before_anything_runs(tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "FILE").write_text("a file, not a folder")
    t0 = time.monotonic()
    r = invoke(["bench", "matmul", "--quick", *args])
    assert r.exit_code == 2 and needle in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["FILE"]  # no results, no partial file
    assert time.monotonic() - t0 < 60


def test_results_survive_a_failing_results_path(tmp_path, monkeypatch):
    """The requested path fails only after the run (here: it became a directory): the results are kept next to it."""
    from rubin.bench import suites

    out = tmp_path / "r.json"
    real_run = suites.run

    def run_then_block(*a, **kw):
        doc = real_run(*a, **kw)
        out.mkdir()  # the path turns unusable while the benchmarks ran
        return doc

    monkeypatch.setattr(suites, "run", run_then_block)
    r = invoke(["bench", "launch", "--quick", "--out", out, "--no-plot", "--set", "launch.kernels=20", "--set", "launch.trials=3"])
    assert r.exit_code == 0, r.stderr
    rescued = tmp_path / "r-rescued.json"
    assert f"the results are in {rescued}" in r.stderr.replace("\n", "")
    assert results.load(rescued)["benchmarks"]["launch"]["status"] == "ok"


def _bad_copy(tmp_path, results_file, edit) -> str:
    doc = json.loads(results_file.read_text())
    edit(doc)
    p = tmp_path / f"bad-{edit.__name__}.json"
    p.write_text(json.dumps(doc))
    return str(p)


def test_compare_refuses_bad_files_with_one_line(tmp_path, results_file):
    binary = tmp_path / "x.bin"
    binary.write_bytes(bytes(range(256)) * 4)

    def short_ci(doc):
        doc["benchmarks"]["launch"]["rows"][0]["wall_us"]["ci95"] = [1.0]

    def no_field(doc):
        del doc["benchmarks"]["launch"]["rows"][0]["device"]

    cases = [
        ([binary], "is not UTF-8 text"),
        ([tmp_path], "is a directory, not a file"),
        ([_bad_copy(tmp_path, results_file, short_ci)], "ci95=[1.0]"),
        ([_bad_copy(tmp_path, results_file, no_field)], "lacks 'device'"),
        ([tmp_path / "missing.json"], "does not exist"),
    ]
    for files, needle in cases:
        r = invoke(["compare", results_file, *files])
        assert r.exit_code == 2 and needle in r.stderr, (files, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "internal error" not in r.stderr


@pytest.mark.parametrize("text,needle", [
    ("version: 7\nrules:\n  - name: x\n    metrics: ['*']\n    within_pct: 5\n",
     "version=7 is not valid: this rubin reads rules version 1"),
    ("version: 1\nrulez: []\n", "unknown key 'rulez' (did you mean 'rules'?)"),
    ("version: 1\nrules:\n  - name: x\n    metrics: ['*']\n    within_pct: .inf\n", "within_pct=inf is not valid"),
    ("version: 1\nrules: [1, 2]\n", "rules[0]=1 is not valid"),
    ("version: 1\nversion: 1\n", "has the key 'version' twice"),
])
def test_rules_file_is_checked(tmp_path, results_file, text, needle):
    rules = tmp_path / "rules.yaml"
    rules.write_text(text)
    r = invoke(["compare", results_file, results_file, "--rules", rules])
    assert r.exit_code == 2 and needle in r.stderr, r.stderr


@pytest.mark.parametrize("args", [
    ["env", "--json"],
    ["bench", "--list-gpus"],
    ["train", "--help-config"],
    ["plan", "--help"],
    ["checkpoint", "list", "RUN"],
    ["compare", "--list-metrics", "RESULTS"],
])
@pytest.mark.parametrize("reader", ["head -1", "true"])  # `true` leaves before the first write: a certain EPIPE
def test_a_reader_that_leaves_early_is_not_an_error(tmp_path, results_file, args, reader):
    run = tmp_path / "run"
    (run / "checkpoints" / "step-00000001").mkdir(parents=True)
    args = [str(run) if a == "RUN" else str(results_file) if a == "RESULTS" else a for a in args]
    cmd = " ".join([sys.executable, "-m", "rubin", *args])
    p = subprocess.run(["bash", "-c", f"{cmd} 2>{tmp_path}/err | {reader}; exit ${{PIPESTATUS[0]}}"], capture_output=True,
                       text=True, timeout=240)
    err = (tmp_path / "err").read_text()
    assert p.returncode in ((0, 3) if args[0] == "checkpoint" else (0,)), err  # 3: the dummy checkpoint is invalid
    assert len(p.stdout.splitlines()) == (1 if reader == "head -1" else 0)
    assert "Traceback" not in err and "internal error" not in err and "BrokenPipe" not in err, err
