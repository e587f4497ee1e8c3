"""Driver facts: the NVIDIA kernel module, nouveau, /dev/nvidia* nodes, nvidia-smi and NVML itself."""

from __future__ import annotations

import grp
import os
import re

from rubin.platform.facts import Command, DevNode, DriverFacts, known, unknown
from rubin.platform.sources import Sources, guarded

_NVIDIA_VENDOR = "0x10de"
_GPU_CLASSES = ("0x0300", "0x0302")  # VGA controller, 3D controller (NVSwitch is a 0x0680 bridge)


def module_version(text: str) -> str:
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    if not m:
        raise ValueError("no version in /proc/driver/nvidia/version")
    return m.group(1)


def loaded_modules(src: Sources) -> set[str]:
    return {line.split()[0] for line in src.read("proc/modules").splitlines() if line.strip()}


def dev_nodes(src: Sources) -> list[DevNode]:
    out = []
    for name in src.listdir("dev"):
        if not name.startswith("nvidia"):
            continue
        path = src.path(f"dev/{name}")
        st = os.stat(path)
        try:
            group = grp.getgrgid(st.st_gid).gr_name
        except KeyError:
            group = str(st.st_gid)
        ok = os.access(path, os.R_OK | os.W_OK) if os.path.exists(path) else False
        out.append(DevNode(path=f"/dev/{name}", mode=f"{st.st_mode & 0o7777:04o}", group=group, accessible=ok))
    return out


def pci_gpus(src: Sources) -> list[str]:
    """The driver bound to each NVIDIA GPU on the PCI bus ("" when none is bound)."""
    drivers = []
    base = "sys/bus/pci/devices"
    for dev in src.listdir(base):
        try:
            vendor = src.read(f"{base}/{dev}/vendor").strip()
            klass = src.read(f"{base}/{dev}/class").strip()
        except OSError:
            continue
        if vendor != _NVIDIA_VENDOR or not klass.startswith(_GPU_CLASSES):
            continue
        link = src.path(f"{base}/{dev}/driver")
        drivers.append(os.path.basename(os.readlink(link)) if os.path.islink(link) else "")
    return drivers


def cuda_version_text(v: int) -> str:
    """NVML's 12080 -> "12.8"."""
    return f"{v // 1000}.{(v % 1000) // 10}"


def _command(res) -> Command:
    return Command(argv=res.argv, returncode=res.returncode, output=res.output[:4000], error=res.error)


def probe(src: Sources) -> DriverFacts:
    f = DriverFacts()
    ver = guarded("/proc/driver/nvidia/version", lambda: src.read("proc/driver/nvidia/version"))
    mods = guarded("/proc/modules", lambda: loaded_modules(src))
    f.proc_version_text = ver if ver.known else unknown(ver.reason or "", ver.source)
    if ver.known:
        f.module_loaded = known(True, ver.source)
        f.module_version = guarded(ver.source, lambda: module_version(ver.value))
    elif mods.known:
        f.module_loaded = known("nvidia" in mods.value, mods.source)
        f.module_version = unknown("the nvidia kernel module is not loaded", ver.source)
    else:
        f.module_loaded = unknown(f"{ver.reason}; {mods.reason}", "/proc/driver/nvidia/version, /proc/modules")
        f.module_version = f.module_loaded
    f.nouveau_loaded = known("nouveau" in mods.value, mods.source) if mods.known else mods

    if f.module_loaded.get() is True:
        f.module_for_kernel = known(True, "loaded")
        f.dkms_status = unknown("not needed: the module is loaded", "dkms status")
    else:
        res = src.run(["modinfo", "-F", "version", "nvidia"])
        if res.ok and res.stdout.strip():
            f.module_for_kernel = known(True, "modinfo -F version nvidia")
        elif res.error is None and "not found" in res.output.lower():
            f.module_for_kernel = known(False, "modinfo -F version nvidia: " + res.output.strip()[:200])
        else:
            f.module_for_kernel = unknown(res.reason(), "modinfo -F version nvidia")
        dk = src.run(["dkms", "status"])
        f.dkms_status = known(dk.output.strip()[:2000], "dkms status") if dk.error is None else unknown(dk.reason(), "dkms status")

    f.dev_nodes = guarded("/dev/nvidia*", lambda: dev_nodes(src))
    pci = guarded("/sys/bus/pci/devices/*/{vendor,class,driver}", lambda: pci_gpus(src))
    f.gpu_pci_drivers = pci
    f.gpu_pci_devices = known(len(pci.value), pci.source) if pci.known else pci

    smi = src.run(["nvidia-smi", "-L"])
    f.nvidia_smi = known(_command(smi), "nvidia-smi -L")

    nv = src.nvml()
    if nv is None:
        err, name = src.nvml_error()
        f.nvml_error = known(err or "NVML unavailable", "pynvml.nvmlInit()")
        f.nvml_error_name = known(name or "UNKNOWN", "pynvml.nvmlInit()")
        for attr in ("driver_version", "cuda_driver_version", "nvml_version"):
            setattr(f, attr, unknown(f"NVML unavailable: {err}", "NVML"))
        return f
    f.nvml_error = known("", "pynvml.nvmlInit()")
    f.nvml_error_name = known("", "pynvml.nvmlInit()")
    f.driver_version = guarded("NVML nvmlSystemGetDriverVersion", lambda: str(nv.system("nvmlSystemGetDriverVersion")))
    f.cuda_driver_version = guarded(
        "NVML nvmlSystemGetCudaDriverVersion", lambda: cuda_version_text(int(nv.system("nvmlSystemGetCudaDriverVersion")))
    )
    f.nvml_version = guarded("NVML nvmlSystemGetNVMLVersion", lambda: str(nv.system("nvmlSystemGetNVMLVersion")))
    return f
