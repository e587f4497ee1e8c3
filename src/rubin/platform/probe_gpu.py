"""Per-GPU facts through NVML: identity, memory, ECC and row remapping, clocks and throttling,
power, PCIe link, MIG, NVLink and NVSwitch fabric state. No CUDA context is created."""

from __future__ import annotations

from rubin.platform.facts import Fact, GpuFacts, known, unknown
from rubin.platform.nvml import Nvml, NvmlError, throttle_names
from rubin.platform.sources import Sources

# nvml.h: nvmlMemoryErrorType_t / nvmlEccCounterType_t / nvmlPageRetirementCause_t
_CORRECTED, _UNCORRECTED = 0, 1
_VOLATILE, _AGGREGATE = 0, 1
_SBE_CAUSE, _DBE_CAUSE = 0, 1
_MAX_LINKS = 18  # NVLink 4/5 expose 18 links per GPU; the loop stops at the first invalid index
_FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}


def _q(nv: Nvml, i: int, fn: str, convert=lambda v: v, *args) -> Fact:
    source = f"NVML {fn}"
    try:
        return known(convert(nv.device(i, fn, *args)), source)
    except NvmlError as exc:
        reason = "not supported on this GPU" if exc.name == "NOT_SUPPORTED" else str(exc)
        return unknown(reason, source)
    except Exception as exc:  # noqa: BLE001 - an odd value from the library is still not a crash
        return unknown(f"{type(exc).__name__}: {exc}", source)


def _nvlinks(nv: Nvml, i: int) -> Fact:
    states = []
    for link in range(_MAX_LINKS):
        try:
            states.append(int(nv.device(i, "nvmlDeviceGetNvLinkState", link)) == 1)
        except NvmlError as exc:
            if link == 0 and exc.name not in ("NOT_SUPPORTED", "INVALID_ARGUMENT"):
                return unknown(str(exc), "NVML nvmlDeviceGetNvLinkState")
            break  # NOT_SUPPORTED on link 0: no NVLink; INVALID_ARGUMENT: past the last link
    return known(states, "NVML nvmlDeviceGetNvLinkState (per link)")


def _fabric(nv: Nvml, i: int) -> Fact:
    fact = _q(nv, i, "nvmlDeviceGetGpuFabricInfo")
    if not fact.known:
        return fact
    return known(_FABRIC_STATES.get(int(fact.value.state), str(fact.value.state)), fact.source)


def probe_one(nv: Nvml, i: int) -> GpuFacts:
    g = GpuFacts(index=i)
    g.name = _q(nv, i, "nvmlDeviceGetName", str)
    g.uuid = _q(nv, i, "nvmlDeviceGetUUID", str)
    g.pci_bus_id = _q(nv, i, "nvmlDeviceGetPciInfo", lambda p: (p.busId.decode() if isinstance(p.busId, bytes) else str(p.busId)))
    g.compute_capability = _q(nv, i, "nvmlDeviceGetCudaComputeCapability", lambda cc: f"{cc[0]}.{cc[1]}")
    mem = _q(nv, i, "nvmlDeviceGetMemoryInfo")
    g.memory_total_bytes = known(int(mem.value.total), mem.source) if mem.known else mem
    g.memory_used_bytes = known(int(mem.value.used), mem.source) if mem.known else mem
    g.persistence_mode = _q(nv, i, "nvmlDeviceGetPersistenceMode", lambda v: int(v) == 1)
    ecc = _q(nv, i, "nvmlDeviceGetEccMode")
    g.ecc_enabled = known(int(ecc.value[0]) == 1, ecc.source) if ecc.known else ecc
    g.ecc_pending = known(int(ecc.value[1]) == 1, ecc.source) if ecc.known else ecc
    if g.ecc_enabled.get() is not False:
        g.ecc_volatile_uncorrected = _q(nv, i, "nvmlDeviceGetTotalEccErrors", int, _UNCORRECTED, _VOLATILE)
        g.ecc_volatile_corrected = _q(nv, i, "nvmlDeviceGetTotalEccErrors", int, _CORRECTED, _VOLATILE)
        g.ecc_aggregate_uncorrected = _q(nv, i, "nvmlDeviceGetTotalEccErrors", int, _UNCORRECTED, _AGGREGATE)
        g.ecc_aggregate_corrected = _q(nv, i, "nvmlDeviceGetTotalEccErrors", int, _CORRECTED, _AGGREGATE)
    else:
        for attr in ("ecc_volatile_uncorrected", "ecc_volatile_corrected", "ecc_aggregate_uncorrected", "ecc_aggregate_corrected"):
            setattr(g, attr, unknown("ECC is disabled", ecc.source))
    g.retired_pages_sbe = _q(nv, i, "nvmlDeviceGetRetiredPages", len, _SBE_CAUSE)
    g.retired_pages_dbe = _q(nv, i, "nvmlDeviceGetRetiredPages", len, _DBE_CAUSE)
    g.retired_pages_pending = _q(nv, i, "nvmlDeviceGetRetiredPagesPendingStatus", lambda v: int(v) == 1)
    rows = _q(nv, i, "nvmlDeviceGetRemappedRows")  # (correctable, uncorrectable, pending, failure)
    if rows.known:
        g.remapped_rows_correctable = known(int(rows.value[0]), rows.source)
        g.remapped_rows_uncorrectable = known(int(rows.value[1]), rows.source)
        g.remap_pending = known(bool(rows.value[2]), rows.source)
        g.remap_failed = known(bool(rows.value[3]), rows.source)
    else:
        g.remapped_rows_correctable = g.remapped_rows_uncorrectable = g.remap_pending = g.remap_failed = rows
    sm = nv.const("NVML_CLOCK_SM", 1)
    g.sm_clock_mhz = _q(nv, i, "nvmlDeviceGetClockInfo", int, sm)
    g.sm_clock_max_mhz = _q(nv, i, "nvmlDeviceGetMaxClockInfo", int, sm)
    try:
        g.throttle_reasons = known(throttle_names(nv.throttle_mask(i)), "NVML nvmlDeviceGetCurrentClocksEventReasons")
    except NvmlError as exc:
        g.throttle_reasons = unknown(str(exc), "NVML nvmlDeviceGetCurrentClocksEventReasons")
    g.util_pct = _q(nv, i, "nvmlDeviceGetUtilizationRates", lambda u: int(u.gpu))
    g.temp_c = _q(nv, i, "nvmlDeviceGetTemperature", int, nv.const("NVML_TEMPERATURE_GPU", 0))
    g.power_w = _q(nv, i, "nvmlDeviceGetPowerUsage", lambda mw: mw / 1000.0)
    g.power_limit_w = _q(nv, i, "nvmlDeviceGetEnforcedPowerLimit", lambda mw: mw / 1000.0)
    g.power_default_limit_w = _q(nv, i, "nvmlDeviceGetPowerManagementDefaultLimit", lambda mw: mw / 1000.0)
    g.pcie_gen = _q(nv, i, "nvmlDeviceGetCurrPcieLinkGeneration", int)
    g.pcie_gen_max = _q(nv, i, "nvmlDeviceGetMaxPcieLinkGeneration", int)
    g.pcie_width = _q(nv, i, "nvmlDeviceGetCurrPcieLinkWidth", int)
    g.pcie_width_max = _q(nv, i, "nvmlDeviceGetMaxPcieLinkWidth", int)
    mig = _q(nv, i, "nvmlDeviceGetMigMode")
    if mig.known:
        g.mig_enabled = known(int(mig.value[0]) == 1, mig.source)
        g.mig_pending = known(int(mig.value[1]) == 1, mig.source)
    elif mig.reason == "not supported on this GPU":
        g.mig_enabled = g.mig_pending = known(False, mig.source + " (MIG not supported)")
    else:
        g.mig_enabled = g.mig_pending = mig
    g.nvlink_up = _nvlinks(nv, i)
    g.fabric_state = _fabric(nv, i)
    g.vbios = _q(nv, i, "nvmlDeviceGetVbiosVersion", str)
    return g


def probe(src: Sources) -> Fact:
    nv = src.nvml()
    if nv is None:
        err, _ = src.nvml_error()
        return unknown(f"NVML unavailable: {err}", "NVML")
    try:
        count = nv.device_count()
    except NvmlError as exc:
        return unknown(str(exc), "NVML nvmlDeviceGetCount")
    return known([probe_one(nv, i) for i in range(count)], "NVML")
