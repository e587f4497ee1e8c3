"""What `run.deterministic: true` pins, so that reruns and resumes are bit-identical on a loaded machine.

`torch.use_deterministic_algorithms(True)` picks deterministic kernels, but on CPU the result of a step
also depends on how the work is split between threads and on what each thread's math library does:

- the intra-op thread count is fixed (not left to whatever a later `set_num_threads` or the launcher
  sets), and OpenMP's and MKL's dynamic threading are turned off, so that a busy machine cannot shrink a
  thread team and change the order of a reduction;
- oneMKL's vector-math functions (VML: `sqrt`, `exp`, `log`, ... on float tensors) are called once per
  thread of the pool before the first step. With oneMKL 2024.2, the first VML call in a process can race
  between OpenMP threads and give one thread's chunk a less accurate result (relative error about 3e-4
  in AdamW's `exp_avg_sq.sqrt()`); every later call is exact. See docs/upstream/mkl-vml-first-call.md.

`pin` returns what it applied; the trainer writes it into env.json under `determinism`.
"""

from __future__ import annotations

import ctypes
import os

# Unary ops whose CPU float kernels call oneMKL VML when torch is built with MKL (ATen/cpu/vml.h).
VML_OPS = ("sqrt", "rsqrt", "exp", "expm1", "log", "log10", "log1p", "log2", "sin", "cos", "tan", "tanh",
           "sinh", "cosh", "asin", "acos", "atan", "erf", "erfc", "erfinv", "reciprocal", "lgamma", "trunc")
GRAIN = 32768  # at::internal::GRAIN_SIZE: parallel_for gives each thread a chunk of at least this many elements


def pin(device) -> dict:
    """Pin threads, dynamic threading, kernels and the VML first call; return what was applied."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(threads)  # an explicit count: torch then sets every pool thread to it
    applied = {"intra_op_threads": threads, "deterministic_algorithms": True}
    omp = _libgomp()
    if omp is not None:
        omp.omp_set_dynamic(0)
        applied["omp_dynamic"] = bool(omp.omp_get_dynamic())
    mkl = _mkl()
    if mkl is not None:
        mkl.MKL_Set_Dynamic(0)  # the C interface (mkl_set_dynamic is Fortran: by reference)
        applied["mkl_dynamic"] = False
    torch.use_deterministic_algorithms(True)
    if device is not None and getattr(device, "type", None) == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        applied["cublas_workspace_config"] = os.environ["CUBLAS_WORKSPACE_CONFIG"]
    applied["vml_warmed"] = warm_vector_math() if torch.backends.mkl.is_available() else []
    return applied


def warm_vector_math() -> list[str]:
    """Call every VML-backed op once on one thread, then once on the whole pool, before any step runs.

    The first call runs alone so that whatever oneMKL sets up on a first call is set up before two
    threads can meet in it; the second gives every pool thread its own first call outside a step.
    """
    import torch

    threads = torch.get_num_threads()
    x = torch.linspace(0.1, 0.9, max(2, threads) * GRAIN, dtype=torch.float32)  # a chunk for every pool thread
    done = []
    for n in (1, threads):
        torch.set_num_threads(n)
        for name in VML_OPS:
            for t in (x, x.double()):
                getattr(torch, name)(t)
            if name not in done:
                done.append(name)
    torch.set_num_threads(threads)
    return done


def _libgomp():
    """The OpenMP runtime torch loaded (GNU libgomp on Linux wheels), or None."""
    path = _loaded_library("libgomp")
    if path is None:
        return None
    lib = ctypes.CDLL(path)
    lib.omp_get_dynamic.restype = ctypes.c_int
    return lib


def _mkl():
    """oneMKL's service functions, linked into torch's CPU library on MKL builds, or None."""
    path = _loaded_library("libtorch_cpu")
    if path is None:
        return None
    lib = ctypes.CDLL(path)
    return lib if hasattr(lib, "MKL_Set_Dynamic") else None


def _loaded_library(stem: str) -> str | None:
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if stem in os.path.basename(path) and path.startswith("/"):
                    return path
    except OSError:  # not Linux: leave the runtime's defaults
        return None
    return None

