"""Driver checks: the kernel module, nouveau, Secure Boot, DKMS, the container GPU runtime,
nvidia-smi failures, NVML version mismatch, device nodes and permissions, persistence, fabric."""

from __future__ import annotations

import re

from rubin.doctor.checks._common import arch, gpu_label, gpus, nvidia_present, vtuple
from rubin.doctor.findings import Finding
from rubin.doctor.registry import check

_SB_MSG = re.compile(r"Lockdown|Key was rejected|module verification failed|Required key not available", re.I)
_MISMATCH = re.compile(r"version mismatch|API mismatch", re.I)


def _driver_missing(facts) -> bool:
    d = facts.driver
    if d.module_loaded.get() is True and d.nvml_error_name.get("") != "DRIVER_NOT_LOADED":
        return False
    return d.module_loaded.get() is False or d.nvml_error_name.get("") == "DRIVER_NOT_LOADED" or (
        d.gpu_pci_devices.get(0) > 0 and not facts.gpu_list())


def driver_causes(facts) -> tuple[str, list[str], str]:
    """(cause, fix, variant) for a driver that is not working, told apart by the evidence."""
    d, s = facts.driver, facts.system
    msgs = " | ".join(facts.environment.kernel_messages.get([]))
    bound = d.gpu_pci_drivers.get([])
    in_container = s.container.get("none") not in ("none", "")
    if in_container and not d.dev_nodes.get([]) and not d.module_loaded.get(False):
        return ("this is a container started without the NVIDIA runtime: no /dev/nvidia* nodes and no driver files "
                "were passed in", ["docker run --gpus all ... (install nvidia-container-toolkit, then "
                "`sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker`)",
                "Kubernetes: request `nvidia.com/gpu: N` in resources.limits and run the NVIDIA device plugin / GPU Operator"],
                "container")
    if d.nouveau_loaded.get(False) or "nouveau" in bound:
        return ("the open-source nouveau driver is bound to the GPU, so the NVIDIA module cannot load",
                ["echo -e 'blacklist nouveau\\noptions nouveau modeset=0' | sudo tee /etc/modprobe.d/blacklist-nouveau.conf",
                 "sudo update-initramfs -u   # dracut -f on RHEL", "sudo reboot"], "nouveau")
    if s.secure_boot.get(False) and (_SB_MSG.search(msgs) or d.module_for_kernel.get(True)):
        return ("Secure Boot is on and the NVIDIA module is not signed with an enrolled key, so the kernel refuses it",
                ["enroll the DKMS signing key: `sudo mokutil --import /var/lib/dkms/mok.pub` and reboot into MOK manager",
                 "or use the distribution's signed driver packages (e.g. `sudo ubuntu-drivers install`)",
                 "or disable Secure Boot in the firmware / VM settings"], "secure_boot")
    if d.module_for_kernel.get() is False:
        return (f"no NVIDIA module is built for the running kernel {s.kernel.get('?')}: a kernel update without a "
                "DKMS rebuild", ["sudo apt install linux-headers-$(uname -r)   # or kernel-devel on RHEL",
                                 "sudo dkms autoinstall && sudo modprobe nvidia", "or reinstall the driver, then reboot",
                                 "prevent it next time: hold the kernel (`apt-mark hold linux-image-generic`) or use "
                                 "precompiled/signed driver packages"], "dkms")
    return ("the NVIDIA kernel module is not loaded", ["sudo modprobe nvidia && nvidia-smi",
            "if modprobe fails, read `sudo dmesg | grep -i -e nvrm -e nvidia` for the reason", "reinstall the driver"],
            "not_loaded")


@check("driver.not_loaded", "NVIDIA driver loaded", gpu=True)
def not_loaded(facts):
    if not nvidia_present(facts) or not _driver_missing(facts):
        return None
    cause, fix, variant = driver_causes(facts)
    d = facts.driver
    return Finding(
        f"driver.not_loaded.{variant}", "driver.not_loaded", "error", "NVIDIA GPUs are present but the driver is not working",
        evidence=f"NVIDIA GPUs on PCI: {d.gpu_pci_devices.show()} (bound to {d.gpu_pci_drivers.get([]) or 'nothing'}); "
                 f"module loaded: {d.module_loaded.show()}; nouveau: {d.nouveau_loaded.show()}; "
                 f"Secure Boot: {facts.system.secure_boot.show()}; NVML: {d.nvml_error.show()}",
        cause=cause, fix=fix,
    )


def smi_failure(text: str) -> tuple[str, list[str]] | None:
    low = text.lower()
    if "couldn't communicate with the nvidia driver" in low:
        return ("nvidia-smi cannot reach the kernel driver (not loaded, not built for this kernel, blocked by "
                "Secure Boot or nouveau, or a container without the GPU runtime)", ["see driver.not_loaded for the cause on this machine"])
    if "version mismatch" in low:
        return ("the user-space NVIDIA libraries were upgraded but the old kernel module is still loaded",
                ["reboot, or unload and reload the modules when no process uses the GPU: "
                 "`sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia`"])
    if "no devices were found" in low:
        return ("the driver is loaded but sees no GPU (GPU passed to a VM/vfio, fallen off the bus, or hidden by the container)",
                ["check `lspci -nnk | grep -A3 -i nvidia` for the bound driver", "look for Xid 79 in `dmesg`; reboot"])
    if "unknown error" in low or "unable to determine the device handle" in low or "gpu is lost" in low:
        return ("a GPU stopped answering (often Xid 79, fallen off the bus)", ["drain the node and reboot; if it repeats, service it"])
    if "insufficient permissions" in low or "permission denied" in low:
        return ("this user cannot open /dev/nvidia*",
                ["add the user to the group that owns /dev/nvidia* (video/render) or fix the udev rule"])
    if "failed to initialize nvml" in low:
        return ("NVML could not initialize", ["reboot if the driver was just upgraded; otherwise reinstall the driver"])
    return None


@check("driver.nvidia_smi", "nvidia-smi runs", gpu=True)
def nvidia_smi(facts):
    smi = facts.driver.nvidia_smi.get()
    if smi is None or (smi.error is not None and "not found" in smi.error):
        if facts.gpu_list():
            return Finding("driver.nvidia_smi.missing", "driver.nvidia_smi", "info", "nvidia-smi is not on PATH",
                           evidence=facts.driver.nvidia_smi.source, cause="NVML works, but the nvidia-smi tool is not installed here "
                           "(common in slim containers); topology could not be read",
                           fix=["install the driver utilities (nvidia-utils-<version>) or mount them with the NVIDIA container runtime "
                                "(NVIDIA_DRIVER_CAPABILITIES=compute,utility)"])
        return None
    if smi.error is None and smi.returncode == 0:
        return None
    known = smi_failure(smi.output or smi.error or "")
    cause, fix = known or ("nvidia-smi failed", ["run `nvidia-smi` by hand and paste the output into `rubin doctor --explain -`"])
    return Finding("driver.nvidia_smi", "driver.nvidia_smi", "error", "nvidia-smi fails",
                   evidence=f"`{' '.join(smi.argv)}` -> {smi.error or f'exit {smi.returncode}'}: {smi.output.strip()[:300]}",
                   cause=cause, fix=fix)


@check("driver.nvml_mismatch", "NVML library matches the kernel module", gpu=True)
def nvml_mismatch(facts):
    d = facts.driver
    smi = d.nvidia_smi.get()
    msgs = " ".join(facts.environment.kernel_messages.get([]))
    hit = d.nvml_error_name.get("") == "LIB_RM_VERSION_MISMATCH" or (smi and _MISMATCH.search(smi.output or "")) \
        or ("API mismatch" in msgs)
    if not hit:
        return None
    return Finding(
        "driver.nvml_mismatch", "driver.nvml_mismatch", "error", "driver/library version mismatch: reload the driver or reboot",
        evidence=f"NVML: {d.nvml_error.show()}; kernel module {d.module_version.show()}; "
                 f"nvidia-smi: {(smi.output.strip()[:200] if smi else 'n/a')}",
        cause="the NVIDIA user-space libraries (libnvidia-ml, libcuda) were upgraded (often by unattended-upgrades) "
              "while the old kernel module stayed loaded; every CUDA program fails until they match",
        fix=["sudo reboot (simplest)", "or, with no GPU process running: `sudo systemctl stop nvidia-persistenced; "
             "sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia; sudo modprobe nvidia nvidia_uvm`",
             "stop it recurring: `sudo apt-mark hold 'nvidia-*' 'libnvidia-*'`"],
    )


@check("driver.nouveau", "nouveau not loaded")
def nouveau(facts):
    if not facts.driver.nouveau_loaded.get(False):
        return None
    return Finding("driver.nouveau", "driver.nouveau", "error" if nvidia_present(facts) else "warn",
                   "the nouveau driver is loaded", evidence=f"nouveau in {facts.driver.nouveau_loaded.source}",
                   cause="nouveau claims NVIDIA GPUs and has no CUDA; the NVIDIA module cannot bind while it is loaded",
                   fix=["blacklist nouveau (/etc/modprobe.d/blacklist-nouveau.conf: `blacklist nouveau`, `options nouveau modeset=0`)",
                        "sudo update-initramfs -u && sudo reboot"])


@check("driver.uvm_missing", "/dev/nvidia-uvm present", gpu=True)
def uvm_missing(facts):
    nodes = {n.path for n in facts.driver.dev_nodes.get([])}
    if not facts.driver.module_loaded.get(False) or not nodes or "/dev/nvidia-uvm" in nodes:
        return None
    return Finding("driver.uvm_missing", "driver.uvm_missing", "error", "/dev/nvidia-uvm is missing",
                   evidence=f"/dev/nvidia* = {sorted(nodes)}",
                   cause="the nvidia_uvm module is not loaded (or its node not created); CUDA needs it, and fails with "
                         "'no CUDA-capable device is detected' or error 999 even though nvidia-smi works",
                   fix=["sudo modprobe nvidia_uvm", "sudo nvidia-modprobe -u -c=0   # creates /dev/nvidia-uvm",
                        "in a container: restart it after fixing the host, the nodes are passed in at start"])


@check("driver.dev_permissions", "GPU device nodes accessible", gpu=True)
def dev_permissions(facts):
    bad = [n for n in facts.driver.dev_nodes.get([]) if not n.accessible]
    if not bad:
        return None
    groups = facts.system.user_groups.get([])
    owner = sorted({n.group for n in bad})
    return Finding("driver.dev_permissions", "driver.dev_permissions", "error",
                   f"{len(bad)} /dev/nvidia* node(s) are not readable and writable by {facts.system.user.get('this user')}",
                   evidence="; ".join(f"{n.path} mode {n.mode} group {n.group}" for n in bad[:6]) + f"; your groups: {groups}",
                   cause="CUDA opens /dev/nvidia* read-write; without access it reports no devices",
                   fix=[f"sudo usermod -aG {owner[0]} $USER   # then log out and in" if owner else "fix the node permissions",
                        "or restore the default udev rule / NVreg_DeviceFileMode=0666"])


@check("system.video_group", "user in the video/render group", gpu=True)
def video_group(facts):
    nodes = facts.driver.dev_nodes.get([])
    user = facts.system.user.get("")
    groups = set(facts.system.user_groups.get([]))
    if not nodes or user == "root" or groups & {"video", "render"}:
        return None
    restricted = [n for n in nodes if n.group in ("video", "render") and int(n.mode, 8) & 0o006 != 0o006]
    if not restricted:
        return None
    g = restricted[0].group
    return Finding("system.video_group", "system.video_group", "warn", f"user {user} is not in the {g} group",
                   evidence=f"{restricted[0].path} mode {restricted[0].mode} group {g}; groups of {user}: {sorted(groups)}",
                   cause=f"the GPU device nodes are only open to the {g} group",
                   fix=[f"sudo usermod -aG {g},render {user}   # then log out and in (or `newgrp {g}`)"])


@check("gpu.persistence", "persistence mode", gpu=True)
def persistence(facts):
    off = [g for g in gpus(facts) if g.persistence_mode.get() is False]
    if not off:
        return None
    return Finding("gpu.persistence", "gpu.persistence", "warn", f"persistence mode is off on {len(off)} GPU(s)",
                   evidence=", ".join(f"GPU {g.index}" for g in off) + f" ({off[0].persistence_mode.source})",
                   cause="without persistence the driver tears the GPU state down when the last process exits: every job "
                         "start pays seconds of initialization, and clock/power settings are lost",
                   fix=["sudo systemctl enable --now nvidia-persistenced", "or `sudo nvidia-smi -pm 1` (until reboot)"])


@check("gpu.fabric", "NVSwitch fabric registered", gpu=True)
def fabric(facts):
    bad = [g for g in gpus(facts) if g.fabric_state.get() in ("not_started", "in_progress")]
    if not bad:
        return None
    return Finding("gpu.fabric", "gpu.fabric", "error", f"NVSwitch fabric not ready on {len(bad)} GPU(s)",
                   evidence=", ".join(f"GPU {g.index}: {g.fabric_state.value}" for g in bad),
                   cause="on NVSwitch systems (HGX/DGX, NVL72) the Fabric Manager must register every GPU before CUDA may use "
                         "it; until then CUDA fails with 'system not yet initialized' (error 802)",
                   fix=["sudo systemctl enable --now nvidia-fabricmanager   # its version must equal the driver's",
                        "GB200/GB300 NVL: check NVLink domain health with `nvidia-smi -q | grep -A3 Fabric`",
                        "journalctl -u nvidia-fabricmanager for the error"])


@check("driver.too_old_for_gpu", "driver new enough for the GPU architecture", gpu=True)
def too_old_for_gpu(facts):
    from rubin.doctor.checks._common import min_driver_for_cuda

    drv = facts.driver.driver_version.get()
    if not drv:
        return None
    out = []
    seen = set()
    for g in gpus(facts):
        cc = g.compute_capability.get()
        info = arch(cc) if cc else None
        if not info or cc in seen:
            continue
        seen.add(cc)
        need, source = min_driver_for_cuda(info["first_cuda"])
        if need and vtuple(drv) < vtuple(need):
            out.append(Finding(f"driver.too_old_for_gpu.sm{cc.replace('.', '')}", "driver.too_old_for_gpu", "error",
                               f"driver {drv} predates {info['name']} (compute capability {cc})",
                               evidence=f"{gpu_label(g)}; driver {drv} ({facts.driver.driver_version.source}); {info['name']} "
                                        f"needs CUDA {info['first_cuda']}, whose driver is >= {need} ({source})",
                               cause="a driver only runs the GPU architectures it knows; minor-version compatibility "
                                     "does not add new GPUs", gpu=g.index,
                               fix=[f"install driver >= {need} (e.g. `sudo apt install nvidia-driver-{vtuple(need)[0]}-server-open`)"]))
    return out
