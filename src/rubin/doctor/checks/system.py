"""System checks: /dev/shm, memlock, disk, host RAM, cgroup memory, CPU-only machines."""

from __future__ import annotations

from rubin.doctor.checks._common import GIB, gib, gpus, nvidia_present
from rubin.doctor.findings import Finding
from rubin.doctor.registry import check


@check("system.cpu_only", "CPU-only machine")
def cpu_only(facts):
    if nvidia_present(facts):
        return None
    d = facts.driver
    return Finding(
        "system.cpu_only", "system.cpu_only", "info", "No NVIDIA GPU on this machine: rubin runs on the CPU",
        evidence=f"PCI NVIDIA GPUs: {d.gpu_pci_devices.show()}; /dev/nvidia*: none; NVML: {d.nvml_error.show()}",
        cause="there is no NVIDIA GPU or driver here; training and benchmarks use the CPU (gloo for multi-process)",
        fix=["nothing to fix for a CPU run; on a GPU node, run `rubin doctor` there"],
    )


@check("system.shm_small", "/dev/shm size")
def shm_small(facts):
    shm = facts.system.shm_total_bytes
    if not shm.known or shm.value >= GIB:
        return None
    sev = "error" if facts.gpu_list() or nvidia_present(facts) else "warn"
    return Finding(
        "system.shm_small", "system.shm_small", sev, f"/dev/shm is only {gib(shm.value)}",
        evidence=f"/dev/shm = {shm.value} bytes ({shm.source}); container: {facts.system.container.show()}",
        cause="DataLoader workers pass batches through /dev/shm and NCCL puts its intra-node buffers there; "
              "Docker's default of 64 MB makes workers die with 'bus error' and NCCL fail",
        fix=["docker run --shm-size=16g ... (or --ipc=host)",
             "Kubernetes: mount an emptyDir with medium: Memory at /dev/shm",
             "or set DataLoader num_workers=0 as a stopgap"],
    )


@check("system.memlock_low", "locked-memory limit (ulimit -l)")
def memlock_low(facts):
    soft = facts.system.memlock_soft_bytes
    if not soft.known or soft.value == -1 or soft.value >= 64 * GIB:
        return None
    rdma = bool(facts.interconnect.ib_ports.get([]))
    sev = "warn" if rdma or facts.gpu_list() else "info"
    return Finding(
        "system.memlock_low", "system.memlock_low", sev, f"locked-memory limit is {soft.value // 1024} KiB, not unlimited",
        evidence=f"ulimit -l soft = {soft.value} bytes ({soft.source}); IB ports: {len(facts.interconnect.ib_ports.get([]))}",
        cause="RDMA (InfiniBand/RoCE, GPUDirect) and pinned host memory need to lock pages; a small limit makes NCCL "
              "fall back to sockets or fail with 'ibv_reg_mr failed' / 'Cannot allocate memory'"
              + ("" if sev != "info" else " (no RDMA here, so this only matters on GPU/IB nodes)"),
        fix=["docker run --ulimit memlock=-1:-1 ...", "bare metal: add `* - memlock unlimited` to /etc/security/limits.conf, log in again",
             "Slurm: PropagateResourceLimits=ALL or set the limit in slurmd's systemd unit (LimitMEMLOCK=infinity)"],
    )


@check("system.disk_low", "free disk at the checkpoint dir")
def disk_low(facts):
    free = facts.system.disk_free_bytes
    if not free.known:
        return None
    gpu_mem = sum(g.memory_total_bytes.get(0) for g in gpus(facts))
    need = max(10 * GIB, 2 * gpu_mem)  # two checkpoints of everything the GPUs can hold, at least 10 GiB
    if free.value >= need:
        return None
    sev = "error" if free.value < 5 * GIB else "warn"
    return Finding(
        "system.disk_low", "system.disk_low", sev, f"only {gib(free.value)} free at {facts.system.disk_path.get('?')}",
        evidence=f"free = {free.value} bytes ({free.source}); total GPU memory = {gib(gpu_mem)}; wanted >= {gib(need)}",
        cause="a checkpoint can be as large as the model and optimizer states the GPUs hold; keeping the last two "
              "needs twice that, and a full disk in the middle of a save loses the run",
        fix=["point --run-dir / the checkpoint dir at a bigger volume (local NVMe or a shared filesystem)",
             "keep fewer checkpoints (checkpoint.keep_last) or free space: `du -sh * | sort -h`"],
    )


@check("system.ram_for_checkpoint", "host RAM vs GPU memory", gpu=True)
def ram_for_checkpoint(facts):
    ram = facts.system.ram_total_bytes
    cg = facts.system.cgroup_memory_limit_bytes.get(-1)
    if not ram.known:
        return None
    usable = min(ram.value, cg) if cg and cg > 0 else ram.value
    gpu_mem = sum(g.memory_total_bytes.get(0) for g in gpus(facts))
    if not gpu_mem or usable >= gpu_mem:
        return None
    return Finding(
        "system.ram_for_checkpoint", "system.ram_for_checkpoint", "warn",
        f"host RAM ({gib(usable)}) is smaller than total GPU memory ({gib(gpu_mem)})",
        evidence=f"RAM {gib(ram.value)} ({ram.source}); cgroup limit {gib(cg) if cg and cg > 0 else 'none'}; "
                 f"GPU memory total {gib(gpu_mem)} over {len(gpus(facts))} GPUs",
        cause="saving or loading a checkpoint stages tensors in host memory; with full GPUs that can exceed RAM and the "
              "OOM killer ends the job (often with no Python traceback)",
        fix=["save sharded checkpoints (FSDP/DCP) so each rank stages only its shard",
             "load with torch.load(..., map_location='cpu', mmap=True)", "use a VM size with more host memory"],
    )


@check("system.cgroup_memory", "container memory limit")
def cgroup_memory(facts):
    cg = facts.system.cgroup_memory_limit_bytes
    ram = facts.system.ram_total_bytes
    if not cg.known or cg.value <= 0 or not ram.known or cg.value >= 0.5 * ram.value:
        return None
    return Finding(
        "system.cgroup_memory", "system.cgroup_memory", "warn",
        f"this container may use only {gib(cg.value)} of the host's {gib(ram.value)}",
        evidence=f"cgroup memory limit {cg.value} bytes ({cg.source})",
        cause="DataLoader workers, pinned buffers and checkpoint staging all count against the limit; past it the "
              "kernel kills the process (exit 137)",
        fix=["raise the limit (docker --memory, Kubernetes resources.limits.memory)", "lower num_workers / prefetch_factor"],
    )
