"""The environment fingerprint: a quick, JSON-safe summary of the machine and the software stack.

The training loop writes it to every run's ``env.json`` and the benchmarks embed it in every
results file, so ``rubin compare`` can diff two runs field by field. It is flat-ish (a few groups
of simple values), fast (no subprocess, no ``import torch`` unless torch is already loaded) and
never initializes CUDA. ``rubin env`` prints it and adds topology, IB and toolkit details.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
import sys

SCHEMA_VERSION = 1


def _safe(fn, default=None):
    try:
        return fn()
    except Exception:  # noqa: BLE001 - a fingerprint field that cannot be read is None, not a crash
        return default


def _torch() -> dict:
    from rubin.platform import probe_software as sw

    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "version"):  # already imported by the caller: ask it
        cuda = getattr(torch.version, "cuda", None)
        cudnn = _safe(lambda: sw.cudnn_text(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None)
        nccl = _safe(lambda: ".".join(map(str, torch.cuda.nccl.version())) if cuda else None)
        return {"version": torch.__version__, "cuda": cuda, "hip": getattr(torch.version, "hip", None),
                "git": getattr(torch.version, "git_version", None), "debug": bool(getattr(torch.version, "debug", False)),
                "cudnn": cudnn, "nccl": nccl, "source": "torch (imported)"}
    vf = _safe(sw.torch_version_file)
    if vf is None:
        return {"version": None, "cuda": None, "hip": None, "git": None, "debug": None, "cudnn": None, "nccl": None,
                "source": "torch not installed"}
    cuda = vf.get("cuda")
    return {"version": vf.get("__version__"), "cuda": cuda, "hip": vf.get("hip"), "git": vf.get("git_version"),
            "debug": bool(vf.get("debug")), "cudnn": sw.cudnn_from_wheel() if cuda else None,
            "nccl": sw.nccl_from_wheel() if cuda else None, "source": "torch/version.py and wheel metadata"}


def _gpu() -> dict:
    from rubin.platform import nvml
    from rubin.platform.probe_driver import cuda_version_text

    nv = nvml.get()
    out = {"count": 0, "names": [], "uuids": [], "memory_bytes": [], "compute_capability": [], "pci_bus_ids": [],
           "driver_version": None, "cuda_driver_version": None, "nvml_error": None}
    if nv is None:
        out["nvml_error"] = nvml.load_error()[0]
        return out
    out["driver_version"] = _safe(lambda: str(nv.system("nvmlSystemGetDriverVersion")))
    out["cuda_driver_version"] = _safe(lambda: cuda_version_text(int(nv.system("nvmlSystemGetCudaDriverVersion"))))
    count = _safe(nv.device_count, 0)
    out["count"] = count
    for i in range(count):
        out["names"].append(nv.try_device(i, "nvmlDeviceGetName"))
        out["uuids"].append(nv.try_device(i, "nvmlDeviceGetUUID"))
        mem = nv.try_device(i, "nvmlDeviceGetMemoryInfo")
        out["memory_bytes"].append(None if mem is None else int(mem.total))
        cc = nv.try_device(i, "nvmlDeviceGetCudaComputeCapability")
        out["compute_capability"].append(None if cc is None else f"{cc[0]}.{cc[1]}")
        pci = nv.try_device(i, "nvmlDeviceGetPciInfo")
        bus = getattr(pci, "busId", None)
        out["pci_bus_ids"].append(bus.decode() if isinstance(bus, bytes) else bus)
    return out


def _host() -> dict:
    from rubin.platform import probe_system as ps
    from rubin.platform.sources import Sources

    src = Sources()
    mem = _safe(lambda: ps.meminfo(src), {})
    return {
        "hostname": _safe(socket.gethostname),
        "os": _safe(lambda: ps.os_name(src)) or platform.platform(),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "cpu_model": _safe(lambda: ps.cpu_model(src)),
        "cpu_count": _safe(lambda: len(os.sched_getaffinity(0)), os.cpu_count()),
        "ram_bytes": mem.get("MemTotal"),
        "container": _safe(lambda: ps.container(src)),
        "vendor": _safe(lambda: src.read("sys/class/dmi/id/sys_vendor").strip()),
        "product": _safe(lambda: src.read("sys/class/dmi/id/product_name").strip()),
    }


def _run_dir(run_dir: str) -> dict:
    path = os.path.abspath(run_dir)
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(probe) or "/"
    st = _safe(lambda: os.statvfs(probe))
    fs = None
    best = ""
    for line in _safe(lambda: open("/proc/mounts").read().splitlines(), []):  # the longest mount prefix wins
        parts = line.split()
        if len(parts) >= 3 and (probe == parts[1] or probe.startswith(parts[1].rstrip("/") + "/")) and len(parts[1]) >= len(best):
            best, fs = parts[1], parts[2]
    return {"path": path, "fs_type": fs, "mount": best or None,
            "free_bytes": None if st is None else st.f_bavail * st.f_frsize}


def fingerprint(run_dir: str | None = None) -> dict:
    """The environment fingerprint (schema ``SCHEMA_VERSION``). Fast, JSON-safe, never inits CUDA."""
    from rubin import __version__
    from rubin.platform import probe_environment as pe
    from rubin.platform import probe_software as sw

    kind, markers = pe.scheduler(os.environ)
    out = {
        "schema_version": SCHEMA_VERSION,
        "collected_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": _host(),
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "rubin": {"version": __version__},
        "torch": _torch(),
        "gpu": _gpu(),
        "packages": _safe(sw.packages, {}),
        "env": pe.relevant_variables(os.environ),
        "scheduler": {"kind": kind, "markers": markers},
    }
    if run_dir is not None:
        out["run_dir"] = _run_dir(run_dir)
    return out
