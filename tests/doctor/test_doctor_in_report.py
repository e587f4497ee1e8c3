"""The report's doctor section from doctor documents: the verdict level, and what did not apply."""

from __future__ import annotations

import json

from doctor_fixtures import healthy, probe_fixture, runner
from test_doctor_checks import TRIGGERS

from rubin.doctor import report as doctor_report
from rubin.doctor.registry import all_checks, run_checks
from rubin.platform.facts import known
from rubin.report import sections


def _section(findings):
    doc = json.loads(json.dumps({"summary": doctor_report.summary(findings), "findings": [f.to_dict() for f in findings],
                                 "checks_run": len(all_checks()), "host": "h"}))
    return sections.doctor(doc, "doctor.json")


def _level(findings) -> str:
    return next(b for b in _section(findings).blocks if b[0] == "verdict")[1]


def test_a_warning_is_inconclusive_and_an_error_fails():
    assert _level(run_checks(healthy())) == "pass"
    warn = run_checks(TRIGGERS["gpu.persistence"][0](healthy()))
    assert doctor_report.summary(warn)["worst"] == "warn"
    assert _level(warn) == "inconclusive"
    err = run_checks(TRIGGERS["system.shm_small"][0](healthy()))
    assert doctor_report.summary(err)["worst"] == "error"
    assert _level(err) == "fail"


def test_checks_that_do_not_apply_are_listed_apart_from_those_that_passed():
    cpu = probe_fixture("docker_no_runtime", nvml_json=None, run=runner(**{"nvidia-smi -L": None}))
    cpu.driver.gpu_pci_devices = known(0, "t")  # no NVIDIA device on the bus: a CPU machine
    found = run_checks(cpu)
    paragraphs = [b[1] for b in _section(found).blocks if b[0] == "p"]
    passed = next(p for p in paragraphs if " checks ok: " in p)
    na = next(p for p in paragraphs if "not applicable" in p)
    n_na = sum(bool(f.skipped) for f in found)
    assert n_na > 20 and na.startswith(f"{n_na} checks not applicable (no NVIDIA GPU on this machine): ")
    assert "NVIDIA driver loaded" in na and "NVIDIA driver loaded" not in passed
    assert "torch importable" in passed
    # On the GPU node nothing is set apart.
    assert not [p for b in _section(run_checks(healthy())).blocks if b[0] == "p" for p in [b[1]] if "not applicable" in p]
