"""The environment fingerprint stored in every results file.

Uses ``rubin.platform.fingerprint`` (the same one ``rubin env`` prints) when it is there; the
minimal fallback below keeps the same top-level names so ``rubin compare`` diffs either.
"""

from __future__ import annotations

import os
import platform
import socket


def minimal() -> dict:
    import torch

    env = {
        "host": socket.gethostname(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": None,
        "nccl": None,
        "driver": None,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "gpus": [],
    }
    if torch.cuda.is_available():
        env["cudnn"] = torch.backends.cudnn.version()
        try:
            env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # noqa: BLE001 - a build without NCCL
            pass
        env["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        try:
            import pynvml

            pynvml.nvmlInit()
            env["driver"] = pynvml.nvmlSystemGetDriverVersion()
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - NVML missing: the driver stays unknown
            pass
    for key in ("NCCL_ALGO", "NCCL_PROTO", "NCCL_IB_HCA", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"):
        if key in os.environ:
            env.setdefault("env_vars", {})[key] = os.environ[key]
    return env


def collect() -> dict:
    try:
        from rubin.platform.fingerprint import fingerprint
    except ImportError:
        return {"source": "rubin.bench.fingerprint.minimal", **minimal()}
    try:
        return {"source": "rubin.platform.fingerprint", **fingerprint()}
    except TypeError:  # an older signature that wants the run dir
        return {"source": "rubin.platform.fingerprint", **fingerprint(None)}
