"""The NVML seam: every NVML call in rubin goes through the one object ``nvml.get()`` returns.

``get()`` gives an ``Nvml`` bound to pynvml (the ``nvidia-ml-py`` package), or ``None`` when the
library or the driver is absent; ``load_error()`` then says why ("Driver Not Loaded", "Driver/
library version mismatch", ...), which the doctor turns into a diagnosis. NVML never creates a CUDA
context, so the probe can ask it anything without touching CUDA in the calling process.

Tests replace the library with ``set_for_tests(Nvml(FakePynvml(recorded)))`` (see ``nvml_fake``):
the wrapper is deliberately thin (``device(i, "nvmlDeviceGetName")``), so a fake is just recorded
return values keyed by pynvml function name.
"""

from __future__ import annotations

import contextlib
import threading
from types import SimpleNamespace

# Clock-event ("throttle") reason bits, from nvml.h (nvmlClocksEventReason*). Names are stable API:
# the training loop logs them and the doctor's throttle check reads them.
THROTTLE_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def throttle_names(mask: int | None) -> list[str]:
    if not mask:
        return []
    names = [name for bit, name in THROTTLE_BITS.items() if mask & bit]
    rest = mask & ~sum(THROTTLE_BITS)
    if rest:
        names.append(f"other_0x{rest:x}")
    return names


class NvmlError(Exception):
    """An NVML call failed. ``name`` is the NVML error constant without its prefix (``NOT_SUPPORTED``)."""

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.name = name


def _error_name(exc: Exception, lib) -> str:
    value = getattr(exc, "value", None)
    try:  # the constants live in pynvml even when ``lib`` is a fake
        import pynvml as consts
    except ImportError:
        consts = lib
    for attr in dir(consts):
        if attr.startswith("NVML_ERROR_") and getattr(consts, attr, object()) == value:
            return attr[len("NVML_ERROR_"):]
    return type(exc).__name__


def _text(value):
    return value.decode(errors="replace") if isinstance(value, bytes) else value


class Nvml:
    """A thin, initialized handle on an NVML library object (pynvml or a fake with the same names)."""

    def __init__(self, lib):
        self.lib = lib
        self._handles: dict[int, object] = {}
        self._lock = threading.Lock()

    def const(self, name: str, default=None):
        return getattr(self.lib, name, default)

    def _wrap(self, fn_name: str, *args):
        fn = getattr(self.lib, fn_name, None)
        if fn is None:
            raise NvmlError("FUNCTION_NOT_FOUND", f"{fn_name} is not in this nvidia-ml-py")
        try:
            return _text(fn(*args))
        except Exception as exc:  # pynvml raises NVMLError subclasses; keep the constant's name
            raise NvmlError(_error_name(exc, self.lib), f"{fn_name}: {exc}") from exc

    def system(self, fn_name: str, *args):
        return self._wrap(fn_name, *args)

    def device_count(self) -> int:
        return int(self._wrap("nvmlDeviceGetCount"))

    def handle(self, index: int):
        with self._lock:
            if index not in self._handles:
                self._handles[index] = self._wrap("nvmlDeviceGetHandleByIndex", int(index))
            return self._handles[index]

    def device(self, index: int, fn_name: str, *args):
        """Call ``fn_name(handle_of(index), *args)``; raises ``NvmlError``."""
        return self._wrap(fn_name, self.handle(index), *args)

    def try_device(self, index: int, fn_name: str, *args, default=None):
        try:
            return self.device(index, fn_name, *args)
        except NvmlError:
            return default

    def throttle_mask(self, index: int) -> int:
        try:
            return int(self.device(index, "nvmlDeviceGetCurrentClocksEventReasons"))
        except NvmlError as exc:
            if exc.name != "FUNCTION_NOT_FOUND":
                raise
        return int(self.device(index, "nvmlDeviceGetCurrentClocksThrottleReasons"))

    def shutdown(self) -> None:
        with contextlib.suppress(Exception):
            self.lib.nvmlShutdown()


def index_of(device) -> int:
    """The NVML index of a torch CUDA DEVICE, found by its UUID (NVML's and CUDA's numbering differ under
    CUDA_VISIBLE_DEVICES, and in CUDA's default fastest-first order); the CUDA index where NVML or the UUID is
    not there to ask, which is right on a machine with one GPU."""
    fallback = getattr(device, "index", None) or 0
    nv = get()
    if nv is None or getattr(device, "type", None) != "cuda":
        return fallback
    from rubin.platform import device as dev

    try:
        uuid = dev.device_uuid(device)
        if uuid is None:
            return fallback
        return int(nv.system("nvmlDeviceGetIndex", nv.system("nvmlDeviceGetHandleByUUID", uuid)))
    except (NvmlError, RuntimeError, AssertionError):  # no such UUID (MIG, a fake), or CUDA would not answer
        return fallback


_state = SimpleNamespace(nvml=None, error=None, error_name=None, loaded=False, override=False)
_load_lock = threading.Lock()


def _load_real() -> None:
    try:
        import pynvml
    except ImportError as exc:
        _state.error, _state.error_name = f"nvidia-ml-py is not installed ({exc})", "LIBRARY_NOT_FOUND"
        return
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no library, no driver, version mismatch: all mean "no NVML"
        _state.error, _state.error_name = str(exc) or type(exc).__name__, _error_name(exc, pynvml)
        return
    _state.nvml = Nvml(pynvml)


def get() -> Nvml | None:
    """The process-wide NVML handle, initialized on first use; ``None`` when NVML is unavailable."""
    if not _state.loaded:
        with _load_lock:
            if not _state.loaded:
                _load_real()
                _state.loaded = True
    return _state.nvml


def load_error() -> tuple[str | None, str | None]:
    """Why ``get()`` returned None: (message, NVML error name such as ``DRIVER_NOT_LOADED``)."""
    get()
    return _state.error, _state.error_name


def set_for_tests(obj: Nvml | None, error: str | None = None, error_name: str | None = None) -> None:
    """Make ``get()`` return ``obj`` (a ``Nvml`` over a fake); with ``obj=None`` and an ``error``,
    simulate a machine where NVML failed to load. ``reset()`` goes back to the real library."""
    _state.nvml, _state.error, _state.error_name = obj, error, error_name
    _state.loaded, _state.override = True, True


def reset() -> None:
    _state.nvml, _state.error, _state.error_name, _state.loaded, _state.override = None, None, None, False, False


@contextlib.contextmanager
def override(obj: Nvml | None, error: str | None = None, error_name: str | None = None):
    saved = SimpleNamespace(**vars(_state))
    set_for_tests(obj, error, error_name)
    try:
        yield obj
    finally:
        for k, v in vars(saved).items():
            setattr(_state, k, v)


class NvmlSampler:
    """Cheap per-GPU telemetry for the training loop and the benchmarks (about 7 NVML calls).

    ``sample()`` returns ``None`` when NVML is unavailable, else a dict with ``util_pct,
    mem_used_bytes, mem_total_bytes, power_w, temp_c, sm_clock_mhz, throttle_reasons``; a field
    the GPU does not support is ``None`` (``throttle_reasons`` is then ``[]``).
    """

    KEYS = ("util_pct", "mem_used_bytes", "mem_total_bytes", "power_w", "temp_c", "sm_clock_mhz", "throttle_reasons")

    def __init__(self, index: int = 0):
        self.index = int(index)
        self._nvml = get()
        if self._nvml is not None:
            try:
                self._nvml.handle(self.index)
            except NvmlError:
                self._nvml = None

    @property
    def available(self) -> bool:
        return self._nvml is not None

    def sample(self) -> dict | None:
        nv = self._nvml
        if nv is None:
            return None
        i = self.index
        util = nv.try_device(i, "nvmlDeviceGetUtilizationRates")
        mem = nv.try_device(i, "nvmlDeviceGetMemoryInfo")
        power_mw = nv.try_device(i, "nvmlDeviceGetPowerUsage")
        temp = nv.try_device(i, "nvmlDeviceGetTemperature", nv.const("NVML_TEMPERATURE_GPU", 0))
        clock = nv.try_device(i, "nvmlDeviceGetClockInfo", nv.const("NVML_CLOCK_SM", 1))
        try:
            reasons = throttle_names(nv.throttle_mask(i))
        except NvmlError:
            reasons = []
        return {
            "util_pct": None if util is None else float(util.gpu),
            "mem_used_bytes": None if mem is None else int(mem.used),
            "mem_total_bytes": None if mem is None else int(mem.total),
            "power_w": None if power_mw is None else power_mw / 1000.0,
            "temp_c": None if temp is None else float(temp),
            "sm_clock_mhz": None if clock is None else float(clock),
            "throttle_reasons": reasons,
        }
