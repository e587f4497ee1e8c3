"""`rubin doctor` and `rubin env` end to end: exit codes, JSON schema, --explain, --help without torch."""

from __future__ import annotations

import json
import subprocess
import sys

from doctor_fixtures import healthy
from utils import invoke

import rubin.platform.probe as probe_mod


def test_doctor_on_this_cpu_machine_is_sensible_and_exits_0():
    r = invoke(["doctor"])
    if "No NVIDIA GPU" in r.stdout:  # the CPU machine CI runs on
        assert r.exit_code == 0, r.stdout + r.stderr
        assert "INFO" in r.stdout and "0 error(s)" in r.stdout
    assert "rubin doctor" in r.stdout and "ok" in r.stdout


def test_doctor_json_schema():
    r = invoke(["doctor", "--json"])
    rep = json.loads(r.stdout)
    assert rep["schema_version"] == 1 and rep["kind"] == "doctor"
    assert rep["checks_run"] >= 30 and set(rep["summary"]) >= {"worst", "error", "warn", "info", "ok"}
    f = rep["findings"][0]
    assert set(f) >= {"id", "check", "severity", "title", "evidence", "cause", "fix"}
    assert rep["facts"]["system"]["cpu_count"]["source"] == "os.sched_getaffinity(0)"
    assert (r.exit_code == 3) == (rep["summary"]["error"] > 0)


def test_doctor_exits_3_when_errors_are_found(monkeypatch):
    from test_doctor_checks import TRIGGERS

    bad = TRIGGERS["system.shm_small"][0](healthy())
    monkeypatch.setattr(probe_mod, "probe", lambda *a, **k: bad)
    r = invoke(["doctor"])
    assert r.exit_code == 3
    assert "ERROR" in r.stdout and "[system.shm_small]" in r.stdout and "1 error(s)" in r.stdout
    rep = json.loads(invoke(["doctor", "--json"]).stdout)
    shm = next(f for f in rep["findings"] if f["id"] == "system.shm_small")
    assert shm["title"] == "/dev/shm is only 0.1 GiB" and any("--shm-size" in x for x in shm["fix"])
    clean = invoke(["doctor", "--all"])  # still the patched facts
    assert clean.exit_code == 3 and "OK" in clean.stdout


def test_doctor_only_and_usage_errors():
    r = invoke(["doctor", "--only", "nosuchcheck"])
    assert r.exit_code == 2 and "--only='nosuchcheck'" in r.stderr
    assert invoke(["doctor", "--explain", "  "]).exit_code == 2
    assert invoke(["doctor", "--bogus"]).exit_code == 2
    rep = json.loads(invoke(["doctor", "--only", "gpu", "--json"]).stdout)
    assert rep["findings"] and all(f["check"].startswith("gpu.") for f in rep["findings"])


def test_list_checks():
    r = invoke(["doctor", "--list-checks", "--json"])
    ids = [c["id"] for c in json.loads(r.stdout)["checks"]]
    assert len(ids) >= 30 and "torch.arch_missing" in ids


def test_explain_text_and_stdin(monkeypatch):
    import io

    r = invoke(["doctor", "--explain", "RuntimeError: CUDA error: device-side assert triggered", "--no-facts"])
    assert r.exit_code == 0 and "device-side assert" in r.stdout and "labels" in r.stdout
    monkeypatch.setattr(sys, "stdin", io.StringIO("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(...)"))
    r = invoke(["doctor", "--explain", "-", "--json", "--no-facts"])
    rep = json.loads(r.stdout)
    assert rep["matches"][0]["id"] == "nccl_timeout" and rep["facts_used"] is False
    r = invoke(["doctor", "--explain", "my cat sat on the keyboard"])
    assert r.exit_code == 0 and "No known cause" in r.stdout and "rubin env" in r.stdout


def test_help_does_not_import_torch():
    code = "import sys; from rubin.cli import main; main(['doctor', '--help']); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().endswith("False") and "--explain" in out.stdout


def test_env_markdown_and_json(tmp_path):
    r = invoke(["env"])
    assert r.exit_code == 0 and r.stdout.startswith("## Environment") and "**torch**" in r.stdout and "nvcc" in r.stdout
    env = json.loads(invoke(["env", "--json", "--run-dir", str(tmp_path)]).stdout)
    assert env["schema_version"] == 1 and "extra" in env and env["run_dir"]["path"] == str(tmp_path)
    assert set(env["extra"]) >= {"torch_arch_list", "nccl", "cudnn", "topology", "ib_ports", "gcc", "libc"}
    quick = json.loads(invoke(["env", "--json", "--quick"]).stdout)
    assert "extra" not in quick and quick["torch"] == env["torch"]


def test_markdown_renders_topology_table():
    from rubin.platform.envreport import markdown

    md = markdown({"schema_version": 1, "collected_at": "t", "extra": {"topology": {"GPU0": {"GPU0": "X", "GPU1": "NV18"},
                                                                                   "GPU1": {"GPU0": "NV18", "GPU1": "X"}}}})
    assert "| GPU0 | X | NV18 |" in md


def test_unknown_facts_are_listed_with_their_reason():
    from test_doctor_checks import cpu_only

    from rubin.doctor.report import unknown_facts

    names = dict(unknown_facts(cpu_only(healthy())))
    assert "NVML unavailable" in names["gpus"] and "driver.driver_version" in names
    assert not any(n.startswith("system.") for n in names)


def test_run_dir_that_is_missing_or_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    for path, needle in [(tmp_path / "nope", "an existing folder"), (tmp_path / "f", "a folder, not a file")]:
        r = invoke(["doctor", "--run-dir", path])
        assert r.exit_code == 2 and needle in r.stderr and str(path) in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""
    assert not (tmp_path / "nope").exists()
