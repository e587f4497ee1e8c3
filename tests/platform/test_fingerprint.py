"""The environment fingerprint: JSON-safe, versioned, GPU fields from NVML, never initializes CUDA."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rubin.platform import nvml, nvml_fake
from rubin.platform.fingerprint import SCHEMA_VERSION, fingerprint

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "doctor" / "nvml"


def test_fingerprint_is_json_safe_and_versioned(tmp_path):
    fp = fingerprint(str(tmp_path / "run"))
    assert json.loads(json.dumps(fp)) == fp
    assert fp["schema_version"] == SCHEMA_VERSION == 1
    for key in ("host", "python", "rubin", "torch", "gpu", "env", "scheduler", "packages", "run_dir"):
        assert key in fp
    assert fp["torch"]["version"].startswith("2.")
    assert fp["run_dir"]["free_bytes"] > 0 and fp["run_dir"]["path"].endswith("run")
    assert fp["host"]["cpu_count"] >= 1


def test_fingerprint_gpus_come_from_nvml():
    with nvml_fake.install(FIX / "h100x8_healthy.json"):
        fp = fingerprint()
    g = fp["gpu"]
    assert g["count"] == 8 and g["names"][0] == "NVIDIA H100 80GB HBM3"
    assert g["driver_version"] == "570.124.06" and g["cuda_driver_version"] == "12.8"
    assert g["compute_capability"] == ["9.0"] * 8 and len(set(g["uuids"])) == 8
    nvml.reset()


def test_fingerprint_env_and_scheduler(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("NCCL_IB_HCA", "mlx5_0")
    monkeypatch.setenv("HF_TOKEN", "secret")
    monkeypatch.setenv("NCCL_SECRET_KEY", "x")
    fp = fingerprint()
    assert fp["scheduler"]["kind"] == "slurm" and fp["scheduler"]["markers"]["SLURM_JOB_ID"] == "4242"
    assert fp["env"]["NCCL_IB_HCA"] == "mlx5_0"
    assert "HF_TOKEN" not in fp["env"] and "NCCL_SECRET_KEY" not in fp["env"]


def test_fingerprint_does_not_import_torch_or_init_cuda():
    code = ("import sys; from rubin.platform.fingerprint import fingerprint; fp = fingerprint(); "
            "print('torch' in sys.modules, fp['torch']['version'] is not None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "True"], out.stderr


def test_fingerprint_uses_torch_when_already_imported():
    code = ("import torch, json; from rubin.platform.fingerprint import fingerprint; fp = fingerprint(); "
            "print(json.dumps([fp['torch']['source'], fp['torch']['version'] == torch.__version__, torch.cuda.is_initialized()]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert json.loads(out.stdout) == ["torch (imported)", True, False], out.stderr
