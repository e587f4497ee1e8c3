"""The device seam: every use of ``torch.cuda`` outside this module goes through here.

Business logic asks this module (``pick_device``, ``synchronize``, ``peak_memory_bytes``...)
so that tests can patch one place, and so the CPU path never touches CUDA.
Nothing here runs at import time; torch is imported inside the functions.
"""

from __future__ import annotations

import os
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


def peak_memory_bytes(device) -> int:
    """CUDA max allocated on GPU; the process's peak RSS on CPU."""
    if device.type == "cuda":
        import torch

        return int(torch.cuda.max_memory_allocated(device))
    return rss_peak_bytes()


def rss_peak_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def rss_bytes() -> int:
    """Current resident set size (Linux /proc; falls back to the peak elsewhere)."""
    try:
        with open(f"/proc/{os.getpid()}/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return rss_peak_bytes()


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
