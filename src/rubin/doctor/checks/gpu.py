"""Per-GPU health checks from NVML: MIG, ECC, row remapping, retired pages, throttling, power cap,
PCIe link, temperature, memory held by other processes, GPU count and mixed models."""

from __future__ import annotations

from collections import Counter

from rubin.doctor.checks._common import gib, gpu_label, gpus
from rubin.doctor.findings import Finding
from rubin.doctor.registry import check

_BAD_THROTTLE = {"hw_slowdown": "error", "hw_thermal_slowdown": "error", "hw_power_brake_slowdown": "error",
                 "sw_thermal_slowdown": "warn", "sw_power_cap": "warn"}


@check("gpu.mig", "MIG mode", gpu=True)
def mig(facts):
    on = [g for g in gpus(facts) if g.mig_enabled.get() or g.mig_pending.get()]
    if not on:
        return None
    return Finding("gpu.mig", "gpu.mig", "warn", f"MIG is enabled (or pending) on {len(on)} GPU(s)",
                   evidence=", ".join(f"GPU {g.index}: current={g.mig_enabled.show()} pending={g.mig_pending.show()}" for g in on),
                   cause="with MIG a process sees at most one GPU instance, NCCL cannot span instances, and whole-GPU "
                         "throughput and memory are divided; a pending change applies only after a GPU reset",
                   fix=["sudo nvidia-smi -i <N> -mig 0 && sudo nvidia-smi -i <N> -r   # for full-GPU training",
                        "or, to use MIG on purpose: set CUDA_VISIBLE_DEVICES=MIG-<uuid> (one instance per process)"])


@check("gpu.ecc", "ECC errors", gpu=True)
def ecc(facts):
    out = []
    for g in gpus(facts):
        vu, au = g.ecc_volatile_uncorrected.get(0), g.ecc_aggregate_uncorrected.get(0)
        vc = g.ecc_volatile_corrected.get(0)
        ev = f"{gpu_label(g)}: volatile uncorrected {vu}, corrected {vc}; aggregate uncorrected {au} ({g.ecc_volatile_uncorrected.source})"
        if vu:
            out.append(Finding("gpu.ecc.uncorrected", "gpu.ecc", "error",
                               f"GPU {g.index} has {vu} uncorrectable ECC error(s) since the last reset",
                               evidence=ev, gpu=g.index, cause="uncorrectable memory errors corrupt data or kill processes (Xid 48/94/95)",
                               fix=[f"drain the GPU, then `sudo nvidia-smi -r -i {g.index}` (or reboot) to retire/remap the row",
                                    "if it recurs: `dcgmi diag -r 3`, then RMA"]))
        elif au:
            out.append(Finding("gpu.ecc.history", "gpu.ecc", "warn", f"GPU {g.index} has {au} uncorrectable ECC error(s) in its lifetime",
                               evidence=ev, gpu=g.index, cause="past uncorrectable errors; the memory may be degrading",
                               fix=["check `nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT`", "run `dcgmi diag -r 3` before long jobs"]))
        elif (g.ecc_enabled.get() is False and g.name.get("").startswith("NVIDIA")
              and any(k in g.name.get("") for k in ("A100", "H100", "H200", "B200", "B300", "GB"))):
            out.append(Finding("gpu.ecc.disabled", "gpu.ecc", "warn", f"ECC is disabled on {gpu_label(g)}", evidence=ev, gpu=g.index,
                               cause="data-center GPUs ship with ECC on; with it off, memory errors silently corrupt training",
                               fix=[f"sudo nvidia-smi -i {g.index} -e 1 && sudo nvidia-smi -i {g.index} -r"]))
    return out


@check("gpu.row_remap", "row remapping", gpu=True)
def row_remap(facts):
    out = []
    for g in gpus(facts):
        ev = (f"{gpu_label(g)}: remap pending {g.remap_pending.show()}, failed {g.remap_failed.show()}, rows remapped "
              f"correctable {g.remapped_rows_correctable.show()} / uncorrectable {g.remapped_rows_uncorrectable.show()} "
              f"({g.remap_pending.source})")
        if g.remap_failed.get():
            out.append(Finding("gpu.row_remap.failed", "gpu.row_remap", "error", f"row remapping FAILED on GPU {g.index}",
                               evidence=ev, gpu=g.index,
                               cause="the GPU has no spare rows left for a bad memory row (Xid 64)",
                               fix=["drain the node and replace the GPU (RMA); `dcgmi diag -r 3` confirms"]))
        elif g.remap_pending.get():
            out.append(Finding("gpu.row_remap.pending", "gpu.row_remap", "warn", f"a row remap is pending on GPU {g.index}",
                               evidence=ev, gpu=g.index,
                               cause="a bad memory row was found; the remap applies only after a GPU reset, until then the row may "
                                     "fault again",
                               fix=[f"when idle: `sudo nvidia-smi -r -i {g.index}` or reboot"]))
    return out


@check("gpu.retired_pages", "retired memory pages", gpu=True)
def retired_pages(facts):
    out = []
    for g in gpus(facts):
        dbe, sbe = g.retired_pages_dbe.get(0), g.retired_pages_sbe.get(0)
        if g.retired_pages_pending.get() or dbe + sbe >= 60:
            out.append(Finding("gpu.retired_pages", "gpu.retired_pages", "warn" if dbe + sbe < 60 else "error",
                               f"GPU {g.index} has retired pages (pending: {g.retired_pages_pending.show()})",
                               evidence=f"{gpu_label(g)}: retired DBE {dbe}, SBE {sbe} ({g.retired_pages_dbe.source})", gpu=g.index,
                               cause="pages with memory errors are retired; pending ones take effect after a reset, and 60+ "
                                     "retired pages is NVIDIA's replacement threshold (pre-Ampere GPUs)",
                               fix=[f"sudo nvidia-smi -r -i {g.index} (or reboot) to apply pending retirements",
                                    "RMA if the count keeps growing"]))
    return out


@check("gpu.throttle", "clock throttling", gpu=True)
def throttle(facts):
    out = []
    for g in gpus(facts):
        reasons = g.throttle_reasons.get([])
        bad = [r for r in reasons if r in _BAD_THROTTLE]
        if "sw_power_cap" in bad and not g.util_pct.get(0):
            bad.remove("sw_power_cap")  # idle GPUs report it spuriously
        if not bad:
            continue
        sev = "error" if any(_BAD_THROTTLE[r] == "error" for r in bad) else "warn"
        out.append(Finding("gpu.throttle", "gpu.throttle", sev, f"GPU {g.index} clocks are throttled: {', '.join(bad)}", gpu=g.index,
                           evidence=f"{gpu_label(g)}: reasons {reasons}; SM {g.sm_clock_mhz.show()} of {g.sm_clock_max_mhz.show()} MHz; "
                                    f"{g.temp_c.show()} C; {g.power_w.show()} W of {g.power_limit_w.show()} W",
                           cause="thermal slowdown means cooling trouble (fans, airflow, liquid loop); HW slowdown / power brake "
                                 "means the board or PSU asserted a limit; a power cap at load caps throughput. One slow GPU "
                                 "slows every synchronous step",
                           fix=["nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER", "check cooling and PSU; service if HW slowdown repeats",
                                "`rubin bench` shows whether it costs throughput"]))
    return out


@check("gpu.power_cap", "power limit at default", gpu=True)
def power_cap(facts):
    out = []
    for g in gpus(facts):
        lim, dflt = g.power_limit_w.get(), g.power_default_limit_w.get()
        if lim and dflt and lim < 0.95 * dflt:
            out.append(Finding("gpu.power_cap", "gpu.power_cap", "warn", f"GPU {g.index} power limit is {lim:.0f} W, default {dflt:.0f} W",
                               evidence=f"{gpu_label(g)}: enforced {lim} W, default {dflt} W ({g.power_limit_w.source})", gpu=g.index,
                               cause="someone lowered the power limit (nvidia-smi -pl, DCGM policy, a datacenter cap); compute-bound "
                                     "training runs slower",
                               fix=[f"sudo nvidia-smi -i {g.index} -pl {dflt:.0f}   # if the cap is not intended"]))
    return out


@check("gpu.pcie", "PCIe link generation and width", gpu=True)
def pcie(facts):
    out = []
    for g in gpus(facts):
        gen, gmax, w, wmax = g.pcie_gen.get(), g.pcie_gen_max.get(), g.pcie_width.get(), g.pcie_width_max.get()
        ev = f"{gpu_label(g)}: PCIe Gen{gen} x{w}, max Gen{gmax} x{wmax} ({g.pcie_gen.source}); utilization {g.util_pct.show()}%"
        if w and wmax and w < wmax:
            out.append(Finding("gpu.pcie.width", "gpu.pcie", "warn", f"GPU {g.index} PCIe link is x{w}, not x{wmax}",
                               evidence=ev, gpu=g.index,
                               cause="a degraded link (bad seating, riser, cable or slot) cuts host<->GPU bandwidth for data loading, "
                                     "checkpoints and GPUDirect RDMA",
                               fix=["reseat the GPU / check the riser; `lspci -vv` LnkSta",
                                    "service the node if it persists after reboot"]))
        elif gen and gmax and gen < gmax:
            idle = not g.util_pct.get(0)
            out.append(Finding("gpu.pcie.gen", "gpu.pcie", "info" if idle else "warn",
                               f"GPU {g.index} PCIe runs at Gen{gen}, max Gen{gmax}",
                               evidence=ev, gpu=g.index,
                               cause="an idle GPU lowers its PCIe generation to save power (normal)" if idle else
                                     ("under load the link should run at its max generation; it trained down "
                                      "(BIOS setting, riser, slot)"),
                               fix=["check again under load (`rubin doctor --deep` loads the GPU)",
                                    "BIOS: set the slot to the max generation"]))
    return out


@check("gpu.temperature", "GPU temperature", gpu=True)
def temperature(facts):
    hot = [g for g in gpus(facts) if g.temp_c.get(0) >= 85]
    if not hot:
        return None
    return Finding("gpu.temperature", "gpu.temperature", "warn", f"{len(hot)} GPU(s) at or above 85 C",
                   evidence=", ".join(f"GPU {g.index}: {g.temp_c.value} C" for g in hot),
                   cause="85 C is the usual health-check limit (SuperBench rule); hotter GPUs throttle and age faster",
                   fix=["check fans, airflow, inlet temperature and the liquid loop"])


@check("gpu.memory_in_use", "GPU memory free before the job", gpu=True)
def memory_in_use(facts):
    busy = [g for g in gpus(facts) if g.memory_total_bytes.get(0) and g.memory_used_bytes.get(0) > 0.10 * g.memory_total_bytes.get(1)]
    if not busy:
        return None
    return Finding("gpu.memory_in_use", "gpu.memory_in_use", "warn", f"{len(busy)} GPU(s) already have memory in use",
                   evidence=", ".join(f"GPU {g.index}: {gib(g.memory_used_bytes.value)} of {gib(g.memory_total_bytes.value)}"
                                      for g in busy),
                   cause="another process (a previous job that did not exit, a notebook, a zombie rank) holds GPU memory; your "
                         "job gets 'CUDA out of memory' earlier than planned",
                   fix=["nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv",
                        "kill the stale processes, or `sudo fuser -v /dev/nvidia*`"])


@check("gpu.count", "every GPU on the bus is usable", gpu=True)
def count(facts):
    pci, nv = facts.driver.gpu_pci_devices.get(), len(gpus(facts))
    if not pci or not facts.gpus.known or nv >= pci or facts.system.container.get("none") != "none":
        return None
    return Finding("gpu.count", "gpu.count", "error", f"{pci} NVIDIA GPUs on the PCI bus but NVML sees {nv}",
                   evidence=f"PCI: {pci} ({facts.driver.gpu_pci_devices.source}); NVML: {nv}; "
                            f"drivers bound: {facts.driver.gpu_pci_drivers.get([])}",
                   cause="a GPU fell off the bus (Xid 79), failed to initialize, or is bound to another driver (vfio-pci)",
                   fix=["sudo dmesg | grep -i -e xid -e nvrm", "reboot; if the GPU stays missing, service the node"])


@check("gpu.mixed", "one GPU model per node", gpu=True)
def mixed(facts):
    names = Counter(g.name.get("?") for g in gpus(facts))
    if len(names) <= 1:
        return None
    return Finding("gpu.mixed", "gpu.mixed", "warn", "this node has different GPU models",
                   evidence=", ".join(f"{n} x{c}" for n, c in names.items()),
                   cause="synchronous data-parallel training runs at the speed (and memory) of the slowest GPU",
                   fix=["set CUDA_VISIBLE_DEVICES to GPUs of one model"])
