"""rubin qualify end to end on this machine (bench left out: it has its own tests and takes a minute),
the baseline bundle, the signed certificate and what --check catches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from utils import ROOT, invoke

pytestmark = pytest.mark.slow
FAST = ["--quick", "--skip", "bench", "--seeds", "1"]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    root = tmp_path_factory.mktemp("qualify")
    r = invoke(["qualify", *FAST, "--out", root / "old", "--save-baseline", root / "bundle"])
    assert r.exit_code == 0, r.stderr
    return root


@pytest.fixture(scope="module")
def signed(baseline):
    pytest.importorskip("cryptography", reason="signing needs the optional cryptography package (rubin[sign])")
    key = baseline / "key.pem"
    assert invoke(["qualify", "--new-key", key]).exit_code == 0
    out = baseline / "new"
    r = invoke(["qualify", *FAST, "--baseline", baseline / "bundle", "--out", out, "--sign-key", key,
                "--prices", ROOT / "examples" / "prices.example.yaml"])
    assert r.exit_code == 0, r.stderr
    return out, key


def test_baseline_bundle(baseline):
    b = baseline / "bundle"
    meta = json.loads((b / "baseline.json").read_text())
    assert meta["kind"] == "rubin.qualify.baseline" and meta["seeds"] == 1
    assert (b / "runs" / "seed-0" / "summary.json").is_file() and (b / "workload.yaml").is_file()
    assert not (b / "runs" / "seed-0" / "checkpoints").exists()
    cert = json.loads((baseline / "old" / "certificate.json").read_text())
    assert cert["verdict"] == "pass" and "signature" not in cert
    assert [s["name"] for s in cert["stages"]] == ["doctor", "bench", "compare", "workload", "verify", "plan cost", "report"]
    assert {s["name"]: s["status"] for s in cert["stages"]}["bench"] == "skipped"


def test_qualify_against_the_baseline(signed):
    out, _ = signed
    cert = json.loads((out / "certificate.json").read_text())
    stages = {s["name"]: s for s in cert["stages"]}
    # Same machine, same deterministic config and seed: verify can demand bit-identical curves.
    assert stages["verify"]["status"] == "ok" and "pass (exact)" in stages["verify"]["detail"]
    # The workload ran on this CPU: qualify does not price a CPU rate as GPU hours (tests/qualify/test_qualify_stages.py
    # prices a GPU run).
    assert stages["plan cost"]["status"] == "skipped" and "CPU" in stages["plan cost"]["detail"]
    assert cert["verdict"] == "pass" and cert["signature"]["algorithm"] == "ed25519"
    assert cert["rubin_version"] and cert["env"]["python"]["version"] and cert["created"]
    for name in ("report.html", "verify.json", "doctor.json", "runs/seed-0/metrics.jsonl"):
        assert name in cert["inputs"]
    assert any(k.endswith("bundle/runs/seed-0/metrics.jsonl") for k in cert["inputs"])
    html = (out / "report.html").read_text()
    assert "data-kind='certificate'" in html and "data-kind='verify'" in html
    assert "data-kind='plan'" not in html  # nothing was priced


def test_check_passes_then_catches_a_changed_file(signed, tmp_path):
    import shutil

    out, key = signed
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    r = invoke(["qualify", "--check", copy / "certificate.json", "--public-key", f"{key}.pub"])
    assert r.exit_code == 0, r.stderr
    assert "signature ok (Ed25519" in r.stdout and "verdict PASS" in r.stdout
    metrics = copy / "runs" / "seed-0" / "metrics.jsonl"
    metrics.write_text(metrics.read_text().replace('"loss":', '"loss": ', 1))
    r = invoke(["qualify", "--check", copy / "certificate.json"])
    assert r.exit_code == 3
    assert r.stderr.startswith("rubin: error: runs/seed-0/metrics.jsonl: sha256 differs")


def test_check_catches_an_edited_verdict(signed, tmp_path):
    out, _ = signed
    cert = json.loads((out / "certificate.json").read_text())
    cert["stages"][0]["detail"] = "all good"
    (tmp_path / "certificate.json").write_text(json.dumps(cert))
    for name in cert["inputs"]:  # the files themselves are intact: only the signature can tell
        if not Path(name).is_absolute():
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_bytes((out / name).read_bytes())
    r = invoke(["qualify", "--check", tmp_path / "certificate.json"])
    assert r.exit_code == 3
    assert "certificate.json: the Ed25519 signature does not match its content" in r.stderr


def test_check_with_another_public_key(signed, tmp_path):
    out, _ = signed
    other = tmp_path / "other.pem"
    assert invoke(["qualify", "--new-key", other]).exit_code == 0
    r = invoke(["qualify", "--check", out / "certificate.json", "--public-key", f"{other}.pub"])
    assert r.exit_code == 3 and "not by --public-key" in r.stderr


def test_unsigned_certificate_says_so(baseline):
    r = invoke(["qualify", "--check", baseline / "old" / "certificate.json"])
    assert r.exit_code == 0 and "unsigned" in r.stdout


def test_a_failing_stage_is_reported_and_the_rest_still_run(baseline, tmp_path):
    bad = tmp_path / "workload.yaml"
    bad.write_text("run:\n  max_steps: 5\nmodel:\n  name: no-such-model\n")
    out = tmp_path / "q"
    r = invoke(["qualify", *FAST, "--workload", bad, "--out", out])
    assert r.exit_code == 1  # inconclusive: a stage could not run
    cert = json.loads((out / "certificate.json").read_text())
    stages = {s["name"]: s for s in cert["stages"]}
    assert stages["doctor"]["status"] == "ok"
    assert stages["workload"]["status"] == "error" and "no-such-model" in stages["workload"]["detail"]
    assert stages["report"]["status"] == "ok" and (out / "report.html").is_file()
    assert cert["verdict"] == "inconclusive"


@pytest.mark.parametrize("args, expect", [
    (["--baseline", "{tmp}"], "is not a baseline bundle (no baseline.json)"),
    (["--check", "{tmp}/nothing.json"], "does not exist"),
    (["--skip", "bnech"], "--skip='bnech' is not valid (did you mean 'bench'?)"),
    (["--seeds", "0"], "--seeds=0 is not valid"),
    (["--sign-key", "{tmp}/missing.pem"], "does not exist; make one with: rubin qualify --new-key"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, expect):
    r = invoke(["qualify", *[a.replace("{tmp}", str(tmp_path)) for a in args], "--out", tmp_path / "out"])
    assert r.exit_code == 2
    assert expect in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_out_must_be_new(tmp_path):
    (tmp_path / "x").write_text("keep me")
    r = invoke(["qualify", "--quick", "--out", tmp_path])
    assert r.exit_code == 2 and "not empty" in r.stderr
    assert (tmp_path / "x").read_text() == "keep me"


def test_check_refuses_a_file_of_another_kind(tmp_path):
    f = tmp_path / "c.json"
    f.write_text('{"kind": "rubin.compare"}')
    r = invoke(["qualify", "--check", f])
    assert r.exit_code == 2 and "expected 'rubin.qualify.certificate'" in r.stderr
