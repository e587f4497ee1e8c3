"""System facts: OS, CPU, NUMA, RAM, /dev/shm, disk, container and cgroup limits, memlock, user."""

from __future__ import annotations

import getpass
import os
import platform
import re
import socket

from rubin.platform.facts import SystemFacts, known
from rubin.platform.sources import Sources, guarded

_SECURE_BOOT_VAR = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
_NO_LIMIT = 1 << 60  # cgroup v1 reports "no limit" as a huge number
# Arm cores have no "model name" in /proc/cpuinfo; name the ones GPU nodes use.
_ARM_PARTS = {"0xd4f": "Arm Neoverse-V2 (NVIDIA Grace)", "0xd40": "Arm Neoverse-V1", "0xd0c": "Arm Neoverse-N1"}


def os_name(src: Sources) -> str:
    for line in src.read("etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    raise ValueError("no PRETTY_NAME in /etc/os-release")


def cpu_model(src: Sources) -> str:
    text = src.read("proc/cpuinfo")
    m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    if m:
        return m.group(1).strip()
    part = re.search(r"^CPU part\s*:\s*(\S+)", text, re.M)
    if part:
        return _ARM_PARTS.get(part.group(1).lower(), f"Arm CPU part {part.group(1)}")
    raise ValueError("no model name or CPU part in /proc/cpuinfo")


def meminfo(src: Sources) -> dict[str, int]:
    out = {}
    for line in src.read("proc/meminfo").splitlines():
        m = re.match(r"(\w+):\s+(\d+)\s*kB", line)
        if m:
            out[m.group(1)] = int(m.group(2)) * 1024
    return out


def parse_size(text: str) -> int:
    """tmpfs ``size=`` values: 65536k, 64m, 1g, or bytes."""
    m = re.fullmatch(r"(\d+)([kmgt]?)", text.strip().lower())
    if not m:
        raise ValueError(f"not a size: {text!r}")
    return int(m.group(1)) * 1024 ** " kmgt".index(m.group(2) or " ")


def shm_total(src: Sources) -> int:
    # Mount options say what a container was given (Docker: size=65536k); statvfs is the fallback.
    try:
        for line in src.read("proc/mounts").splitlines():
            parts = line.split()
            if len(parts) >= 4 and parts[1] == "/dev/shm":
                m = re.search(r"(?:^|,)size=([^,]+)", parts[3])
                if m:
                    return parse_size(m.group(1))
    except FileNotFoundError:
        pass
    st = os.statvfs(src.path("dev/shm"))
    return st.f_blocks * st.f_frsize


def container(src: Sources) -> str:
    if src.env.get("KUBERNETES_SERVICE_HOST") or src.exists("var/run/secrets/kubernetes.io/serviceaccount"):
        return "kubernetes"
    if src.exists("run/.containerenv") or src.env.get("container") == "podman":
        return "podman"
    if src.exists(".dockerenv"):
        return "docker"
    try:
        cg = src.read("proc/1/cgroup")
    except OSError:
        cg = ""
    for word, kind in (("kubepods", "kubernetes"), ("docker", "docker"), ("containerd", "containerd"), ("lxc", "lxc")):
        if word in cg:
            return kind
    if src.env.get("container"):
        return src.env["container"]
    return "none"


def cgroup_memory_limit(src: Sources) -> int:
    for p in ("sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes"):
        if src.exists(p):
            raw = src.read(p).strip()
            if raw == "max" or int(raw) >= _NO_LIMIT:
                return -1
            return int(raw)
    raise FileNotFoundError(None, None, "/sys/fs/cgroup/memory.max")


def cgroup_cpu_limit(src: Sources) -> float:
    if src.exists("sys/fs/cgroup/cpu.max"):
        quota, period = src.read("sys/fs/cgroup/cpu.max").split()[:2]
        return -1.0 if quota == "max" else int(quota) / int(period)
    if src.exists("sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
        quota = int(src.read("sys/fs/cgroup/cpu/cpu.cfs_quota_us"))
        period = int(src.read("sys/fs/cgroup/cpu/cpu.cfs_period_us"))
        return -1.0 if quota < 0 else quota / period
    raise FileNotFoundError(None, None, "/sys/fs/cgroup/cpu.max")


def memlock(src: Sources) -> tuple[int, int]:
    """(soft, hard) locked-memory limits in bytes; -1 is unlimited. From /proc/self/limits."""
    for line in src.read("proc/self/limits").splitlines():
        if line.startswith("Max locked memory"):
            soft, hard = line.split()[3:5]
            conv = lambda v: -1 if v == "unlimited" else int(v)  # noqa: E731
            return conv(soft), conv(hard)
    raise ValueError("no 'Max locked memory' line in /proc/self/limits")


def secure_boot(src: Sources) -> bool:
    if not src.exists("sys/firmware/efi"):
        return False  # legacy BIOS boot: no Secure Boot
    data = open(src.path(_SECURE_BOOT_VAR), "rb").read()
    return len(data) >= 5 and data[4] == 1  # 4 bytes of attributes, then the value


def user_groups() -> list[str]:
    import grp

    names = []
    for gid in sorted(set(os.getgroups()) | {os.getgid()}):
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            names.append(str(gid))
    return names


def numa_nodes(src: Sources) -> int:
    nodes = [d for d in src.listdir("sys/devices/system/node") if re.fullmatch(r"node\d+", d)]
    if not nodes:
        raise ValueError("no node* entries")
    return len(nodes)


def probe(src: Sources) -> SystemFacts:
    f = SystemFacts()
    f.hostname = guarded("socket.gethostname()", socket.gethostname)
    f.os_name = guarded("/etc/os-release", lambda: os_name(src))
    f.kernel = guarded("/proc/sys/kernel/osrelease", lambda: src.read("proc/sys/kernel/osrelease").strip())
    f.arch = known(platform.machine(), "platform.machine()")
    f.cpu_model = guarded("/proc/cpuinfo", lambda: cpu_model(src))
    f.cpu_count = guarded("os.sched_getaffinity(0)", lambda: len(os.sched_getaffinity(0)))
    f.numa_nodes = guarded("/sys/devices/system/node", lambda: numa_nodes(src))
    mem = guarded("/proc/meminfo", lambda: meminfo(src))
    if mem.known:
        f.ram_total_bytes = guarded("/proc/meminfo MemTotal", lambda: mem.value["MemTotal"])
        f.ram_available_bytes = guarded("/proc/meminfo MemAvailable", lambda: mem.value["MemAvailable"])
    else:
        f.ram_total_bytes = f.ram_available_bytes = mem
    f.shm_total_bytes = guarded("/proc/mounts /dev/shm size (statvfs fallback)", lambda: shm_total(src))
    disk = os.path.abspath(src.run_dir)
    f.disk_path = known(disk, "--run-dir (default: the current directory)")
    f.disk_free_bytes = guarded(f"os.statvfs({disk})", lambda: _free(disk))
    f.container = guarded("/.dockerenv, /run/.containerenv, /proc/1/cgroup, $KUBERNETES_SERVICE_HOST", lambda: container(src))
    f.cgroup_memory_limit_bytes = guarded("/sys/fs/cgroup memory.max", lambda: cgroup_memory_limit(src))
    f.cgroup_cpu_limit = guarded("/sys/fs/cgroup cpu.max", lambda: cgroup_cpu_limit(src))
    lock = guarded("/proc/self/limits", lambda: memlock(src))
    if lock.known:
        f.memlock_soft_bytes = known(lock.value[0], lock.source + " (soft)")
        f.memlock_hard_bytes = known(lock.value[1], lock.source + " (hard)")
    else:
        f.memlock_soft_bytes = f.memlock_hard_bytes = lock
    f.secure_boot = guarded("/sys/firmware/efi/efivars/SecureBoot-*", lambda: secure_boot(src))
    f.user = guarded("getpass.getuser()", getpass.getuser)
    f.user_groups = guarded("os.getgroups()", user_groups)
    f.dmi_vendor = guarded("/sys/class/dmi/id/sys_vendor", lambda: src.read("sys/class/dmi/id/sys_vendor").strip())
    f.dmi_product = guarded("/sys/class/dmi/id/product_name", lambda: src.read("sys/class/dmi/id/product_name").strip())
    return f


def _free(path: str) -> int:
    while not os.path.exists(path):  # the checkpoint dir may not exist yet: measure its parent
        path = os.path.dirname(path) or "/"
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize

