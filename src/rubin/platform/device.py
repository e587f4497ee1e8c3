"""The device seam: every use of ``torch.cuda`` outside this module goes through here.

Business logic asks this module (``pick_device``, ``synchronize``, ``peak_memory_bytes``...)
so that tests can patch one place, and so the CPU path never touches CUDA.
Nothing here runs at import time; torch is imported inside the functions.
"""

from __future__ import annotations

import resource
import sys


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def device_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def pick_device(local_rank: int = 0, want: str = "auto"):
    """The torch.device this rank trains on: ``cuda:LOCAL_RANK`` when CUDA is there, else cpu."""
    import torch

    if want == "cpu" or (want == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        from rubin.errors import bad_value

        raise bad_value("device", want, "CUDA is not available on this machine", "use device=auto or cpu")
    index = local_rank % max(torch.cuda.device_count(), 1)
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def default_backend(device) -> str:
    return "nccl" if getattr(device, "type", str(device)) == "cuda" else "gloo"


def synchronize(device) -> None:
    if getattr(device, "type", None) == "cuda":
        import torch

        torch.cuda.synchronize(device)


def supports_bf16(device) -> bool:
    import torch

    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    return True


def device_name(device) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import platform

    return platform.processor() or platform.machine() or "cpu"


def capability(device) -> tuple[int, int] | None:
    import torch

    if device.type == "cuda":
        return tuple(torch.cuda.get_device_capability(device))
    return None


def reset_peak_memory(device) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats(device)


def allocated_bytes(device) -> int:
    """Bytes the CUDA caching allocator has handed out now (0 on CPU, which keeps no such counter)."""
    if device.type == "cuda":
        import torch

        return int(torch.cuda.memory_allocated(device))
    return 0


def peak_memory_bytes(device) -> int:
    """CUDA max allocated on GPU; the process's peak RSS on CPU."""
    if device.type == "cuda":
        import torch

        return int(torch.cuda.max_memory_allocated(device))
    return rss_peak_bytes()


def rss_peak_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def manual_seed_all(seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def cuda_rng_states():
    import torch

    return torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []


def set_cuda_rng_states(states) -> None:
    import torch

    if states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states)


def empty_cache(device) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.empty_cache()


def record_memory_history(on: bool) -> None:
    """Start (or stop) recording CUDA allocations for a memory snapshot (PyTorch's memory viewer)."""
    import torch

    torch.cuda.memory._record_memory_history(max_entries=100_000 if on else 0, enabled="all" if on else None)


def dump_memory_snapshot(path: str) -> None:
    import torch

    torch.cuda.memory._dump_snapshot(path)


# -- benchmark support (rubin.bench): memory facts, device timers, pinned buffers, power ----------


def total_memory_bytes(device) -> int | None:
    """Total memory the device reports (CUDA only; ``None`` on CPU)."""
    if getattr(device, "type", None) == "cuda":
        import torch

        return int(torch.cuda.get_device_properties(device).total_memory)
    return None


def device_uuid(device) -> str | None:
    """The GPU's UUID as NVML spells it (``GPU-xxxxxxxx-...``), for mapping a CUDA device to its NVML handle;
    ``None`` on CPU or when the properties carry none. CUDA numbers devices after CUDA_VISIBLE_DEVICES (and
    fastest-first by default), NVML by PCI bus: the same index is often another GPU."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    if not uuid:
        return None
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def l2_cache_bytes(device) -> int | None:
    """L2 size in bytes on CUDA (to size the cache flush between timed kernels); ``None`` elsewhere."""
    if getattr(device, "type", None) == "cuda":
        import torch

        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)) or None
    return None


class _WallTimer:
    """Host timer; the CPU path of ``timer``."""

    def __init__(self):
        import time

        self._clock = time.perf_counter
        self._t0 = self._t1 = 0.0

    def start(self) -> None:
        self._t0 = self._clock()

    def stop(self) -> None:
        self._t1 = self._clock()

    def elapsed_s(self) -> float:
        return self._t1 - self._t0


class _CudaEventTimer:
    """CUDA events around the work: device time, no host sync between start and stop."""

    def __init__(self, device):
        import torch

        self._device = device
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def start(self) -> None:
        self._start.record()

    def stop(self) -> None:
        self._end.record()

    def elapsed_s(self) -> float:
        self._end.synchronize()
        return self._start.elapsed_time(self._end) / 1000.0


def timer(device):
    """A timer with ``start()``, ``stop()`` and ``elapsed_s()``: CUDA events on GPU, perf_counter on CPU."""
    if getattr(device, "type", None) == "cuda":
        return _CudaEventTimer(device)
    return _WallTimer()


def host_buffer(nbytes: int, *, pinned: bool):
    """A uint8 host tensor; page-locked when ``pinned`` (needs CUDA), pageable otherwise."""
    import torch

    return torch.empty(int(nbytes), dtype=torch.uint8, pin_memory=bool(pinned) and torch.cuda.is_available())


def new_stream(device):
    """A side CUDA stream on ``device`` (for copies that overlap compute)."""
    import torch

    return torch.cuda.Stream(device=device)


def current_stream(device):
    import torch

    return torch.cuda.current_stream(device)


def stream_context(stream):
    import torch

    return torch.cuda.stream(stream)


def record_stream(tensor, stream) -> None:
    """Tell the caching allocator that ``tensor`` is used on ``stream`` (its memory is not reused before)."""
    tensor.record_stream(stream)


def wait_stream(stream) -> None:
    """Make the current stream wait for the work queued on ``stream`` (no host sync)."""
    import torch

    torch.cuda.current_stream(stream.device).wait_stream(stream)


def fp8_matmul_supported(device) -> bool:
    """``torch._scaled_mm`` with float8_e4m3fn needs CUDA compute capability 8.9 or newer."""
    import torch

    if getattr(device, "type", None) != "cuda" or not hasattr(torch, "_scaled_mm"):
        return False
    if not hasattr(torch, "float8_e4m3fn"):
        return False
    return tuple(torch.cuda.get_device_capability(device)) >= (8, 9)


def set_tf32(enabled: bool) -> bool:
    """Allow or forbid TF32 in matmuls; returns the previous setting (so callers can restore it)."""
    import torch

    previous = bool(torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = bool(enabled)
    return previous


def power_watts(index: int = 0) -> float | None:
    """Board power draw of GPU ``index`` from NVML, in watts; ``None`` without NVML or a GPU."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(int(index))
            return pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML, no GPU, no permission: power is simply unknown
        return None
