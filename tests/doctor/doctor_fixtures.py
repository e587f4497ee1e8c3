"""Facts built from the recorded fixtures (tests/fixtures/doctor): a healthy 8x H100 node and helpers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rubin.platform import nvml_fake
from rubin.platform.commands import CommandResult, FakeRunner
from rubin.platform.facts import known
from rubin.platform.probe import probe
from rubin.platform.sources import Sources

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "doctor"
TREES = FIX / "trees"


def torch_probe_output(cuda: str = "12.8", archs: str = "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90 sm_100 sm_120 compute_120",
                       available: bool = True, count: int = 8, error: str = "") -> CommandResult:
    out = {"version": f"2.13.0+cu{cuda.replace('.', '')}", "cuda": cuda, "arch_list": archs.split(), "cudnn": 91002,
           "nccl": "2.27.5", "available": available, "count": count if available else 0}
    if error:
        out["error"] = error
    return CommandResult([sys.executable], 0, "RUBIN-TORCH-PROBE " + json.dumps(out) + "\n", "")


def runner(**over) -> FakeRunner:
    responses = {
        "nvidia-smi -L": "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08x}-6a2b-4c1d-9e0f-2b7c3d4e5f{i:02d})\n"
                                 for i in range(8)),
        "nvidia-smi topo -m": (FIX / "topo" / "h100x8_nvswitch.txt").read_text(),
        "dmesg": "",
        sys.executable: torch_probe_output(),
    }
    responses.update(over)
    return FakeRunner(responses)


def probe_fixture(tree: str = "gpu_host", nvml_json: str | None = "h100x8_healthy.json", env: dict | None = None,
                  run=None, torch_cuda: str | None = "12.8"):
    """Probe a fixture tree through the fake runner and fake NVML; torch's version comes from a patch."""
    import rubin.platform.probe_software as ps

    src = Sources(root=str(TREES / tree), env=env or {}, runner=run or runner(), run_dir=str(TREES / tree))
    saved = ps.torch_version_file
    ps.torch_version_file = lambda: {"__version__": f"2.13.0+cu{(torch_cuda or '').replace('.', '')}" if torch_cuda else "2.13.0+cpu",
                                     "cuda": torch_cuda, "hip": None}
    try:
        if nvml_json is None:
            from rubin.platform import nvml

            with nvml.override(None, "NVML Shared Library Not Found", "LIBRARY_NOT_FOUND"):
                return probe(src)
        with nvml_fake.install(FIX / "nvml" / nvml_json):
            return probe(src)
    finally:
        ps.torch_version_file = saved


_BASE = None


def healthy():
    """A fresh copy of the healthy 8x H100 node's facts (probed once, then deep-copied)."""
    global _BASE
    if _BASE is None:
        f = probe_fixture(env={"OMP_NUM_THREADS": "8"})
        f.system.cpu_count = known(192, "fixture")
        f.system.disk_free_bytes = known(20 * 2**40, "fixture")
        f.system.user = known("root", "fixture")
        _BASE = f
    return _BASE.model_copy(deep=True)


def gpu(facts, i=0):
    return facts.gpu_list()[i]
