"""Record this machine's NVML answers in the fake's format (see ``nvml_fake``), for test fixtures.

    python -m rubin.platform.nvml_record > tests/fixtures/doctor/nvml/<machine>.json

It calls exactly what the probe and the sampler call, so a recording replays the machine in tests.
UUIDs and serials are kept as NVML returns them; edit them out before publishing if needed.
"""

from __future__ import annotations

import json
import sys

from rubin.platform import nvml as seam
from rubin.platform.nvml import NvmlError

SYSTEM = ("nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion", "nvmlSystemGetNVMLVersion")
# (function, argument tuples); () means "called without extra arguments".
DEVICE = [
    ("nvmlDeviceGetName", [()]), ("nvmlDeviceGetUUID", [()]), ("nvmlDeviceGetPciInfo", [()]),
    ("nvmlDeviceGetCudaComputeCapability", [()]), ("nvmlDeviceGetMemoryInfo", [()]), ("nvmlDeviceGetPersistenceMode", [()]),
    ("nvmlDeviceGetEccMode", [()]), ("nvmlDeviceGetTotalEccErrors", [(1, 0), (0, 0), (1, 1), (0, 1)]),
    ("nvmlDeviceGetRetiredPages", [(0,), (1,)]), ("nvmlDeviceGetRetiredPagesPendingStatus", [()]),
    ("nvmlDeviceGetRemappedRows", [()]), ("nvmlDeviceGetClockInfo", [(1,)]), ("nvmlDeviceGetMaxClockInfo", [(1,)]),
    ("nvmlDeviceGetCurrentClocksEventReasons", [()]), ("nvmlDeviceGetUtilizationRates", [()]), ("nvmlDeviceGetTemperature", [(0,)]),
    ("nvmlDeviceGetPowerUsage", [()]), ("nvmlDeviceGetEnforcedPowerLimit", [()]), ("nvmlDeviceGetPowerManagementDefaultLimit", [()]),
    ("nvmlDeviceGetCurrPcieLinkGeneration", [()]), ("nvmlDeviceGetMaxPcieLinkGeneration", [()]),
    ("nvmlDeviceGetCurrPcieLinkWidth", [()]), ("nvmlDeviceGetMaxPcieLinkWidth", [()]), ("nvmlDeviceGetMigMode", [()]),
    ("nvmlDeviceGetGpuFabricInfo", [()]), ("nvmlDeviceGetVbiosVersion", [()]),
]


def _plain(v):
    if hasattr(v, "_fields_"):  # a ctypes struct from pynvml
        return {name: _plain(getattr(v, name)) for name, *_ in v._fields_}
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "__dict__") and not isinstance(v, (int, float, str)):
        return {k: _plain(x) for k, x in vars(v).items()}
    return v


def record(nv) -> dict:
    out = {"init_error": None, "system": {}, "devices": []}
    for fn in SYSTEM:
        try:
            out["system"][fn] = _plain(nv.system(fn))
        except NvmlError as exc:
            out["system"][fn] = {"error": exc.name}
    for i in range(nv.device_count()):
        dev = {}
        for fn, arglists in DEVICE:
            for args in arglists:
                key = f"{fn}:{','.join(map(str, args))}" if args else fn
                try:
                    dev[key] = _plain(nv.device(i, fn, *args))
                except NvmlError as exc:
                    dev[key] = {"error": exc.name}
        for link in range(19):
            try:
                dev[f"nvmlDeviceGetNvLinkState:{link}"] = int(nv.device(i, "nvmlDeviceGetNvLinkState", link))
            except NvmlError as exc:
                dev[f"nvmlDeviceGetNvLinkState:{link}"] = {"error": exc.name}
                break
        out["devices"].append(dev)
    return out


def main() -> int:
    nv = seam.get()
    if nv is None:
        msg, name = seam.load_error()
        print(json.dumps({"init_error": name or "UNKNOWN", "message": msg}, indent=1))
        return 1
    print(json.dumps(record(nv), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
