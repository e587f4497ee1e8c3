"""A fake NVML library that replays recorded pynvml results (for tests, here and in other packages).

Recorded data is a dict (usually a JSON file under tests/fixtures/doctor/nvml/)::

    {"init_error": null,                       # or "DRIVER_NOT_LOADED", "LIB_RM_VERSION_MISMATCH", ...
     "system": {"nvmlSystemGetDriverVersion": "570.124.06", "nvmlSystemGetCudaDriverVersion": 12080},
     "devices": [{"nvmlDeviceGetName": "NVIDIA H100 80GB HBM3",
                  "nvmlDeviceGetMemoryInfo": {"total": 85520809984, "used": 0, "free": 85520809984},
                  "nvmlDeviceGetNvLinkState:3": 0,       # a call with arguments: name:arg1,arg2
                  "nvmlDeviceGetEccMode": {"error": "NOT_SUPPORTED"}}]}

A function that is not recorded raises NVML_ERROR_NOT_SUPPORTED, as a GPU without the feature does.
Dict values come back as objects with attributes (like pynvml's ctypes structs); lists stay lists.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pynvml

from rubin.platform.nvml import Nvml


def _error(name: str) -> Exception:
    code = getattr(pynvml, f"NVML_ERROR_{name}", pynvml.NVML_ERROR_UNKNOWN)
    return pynvml.NVMLError(code)


def _value(v):
    if isinstance(v, dict):
        if set(v) == {"error"}:
            raise _error(v["error"])
        return SimpleNamespace(**{k: _value(x) for k, x in v.items()})
    return v


class FakePynvml:
    def __init__(self, data: dict):
        self.data = data
        self.calls: list[str] = []

    def __getattr__(self, name: str):
        if name.startswith("NVML") or name.startswith("nvmlClocks"):
            return getattr(pynvml, name)  # constants and error classes come from the real module
        if name.startswith("nvmlDevice"):
            return lambda handle, *args: self._device(name, handle, args)
        if name.startswith("nvmlSystem"):
            return lambda *args: self._lookup(self.data.get("system", {}), name, args)
        raise AttributeError(name)

    def _lookup(self, table: dict, name: str, args: tuple):
        self.calls.append(name)
        key = f"{name}:{','.join(str(a) for a in args)}" if args else name
        if key in table:
            return _value(table[key])
        if name in table:  # recorded once for every argument
            return _value(table[name])
        raise _error("NOT_SUPPORTED")

    def _device(self, name: str, handle, args: tuple):
        return self._lookup(self.data["devices"][handle], name, args)

    def nvmlInit(self):
        if self.data.get("init_error"):
            raise _error(self.data["init_error"])

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.data.get("devices", []))

    def nvmlDeviceGetHandleByIndex(self, index: int):
        if not 0 <= index < len(self.data.get("devices", [])):
            raise _error("INVALID_ARGUMENT")
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid: str):
        """The handle (here: the index) of the device whose recorded nvmlDeviceGetUUID is UUID."""
        self.calls.append("nvmlDeviceGetHandleByUUID")
        for index, device in enumerate(self.data.get("devices", [])):
            if device.get("nvmlDeviceGetUUID") == uuid:
                return index
        raise _error("NOT_FOUND")

    def nvmlDeviceGetIndex(self, handle):
        return handle


def fake_nvml(data: dict | str | Path) -> Nvml | None:
    """An initialized ``Nvml`` over recorded data (a dict or a JSON path); ``None`` if init fails."""
    if not isinstance(data, dict):
        data = json.loads(Path(data).read_text())
    lib = FakePynvml(data)
    try:
        lib.nvmlInit()
    except pynvml.NVMLError:
        return None
    return Nvml(lib)


def install(data: dict | str | Path):
    """Return an ``rubin.platform.nvml.override(...)`` context for this recording, init errors included."""
    from rubin.platform import nvml

    if not isinstance(data, dict):
        data = json.loads(Path(data).read_text())
    obj = fake_nvml(data)
    if obj is None:
        err = _error(data["init_error"])
        return nvml.override(None, str(err), data["init_error"])
    return nvml.override(obj)
