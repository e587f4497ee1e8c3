"""torch.compile per block (regional), with a cache that outlives the process and a timed first step.

Compiling the repeated block once and reusing it for every layer (torchtitan's way) keeps compile time
near one block's, not the whole model's. ``auto`` compiles on CUDA only: on a CPU the compile costs
more than it gains for rubin's workloads. A block that fails to trace falls back to eager with one
warning; the run goes on. The inductor caches (FX graph and AOT autograd) go to a directory that a
resumed or requeued run finds again, so it does not pay the compile a second time.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

from rubin.errors import bad_choice

MODES = ("auto", "true", "false")


def wanted(mode, device) -> bool:
    """Whether to compile: ``true``/``false`` as given, ``auto`` only on CUDA."""
    mode = {True: "true", False: "false"}.get(mode, mode)
    if mode not in MODES:
        raise bad_choice("distributed.compile", mode, MODES)
    if mode == "auto":
        return getattr(device, "type", str(device)) == "cuda"
    return mode == "true"


def use_cache_dir(path: str | os.PathLike) -> Path:
    """Point inductor's on-disk caches at ``path`` (made if missing); an explicit env setting wins.

    TORCHINDUCTOR_CACHE_DIR is read when inductor first needs it, so this must run before the
    first compile; the FX graph and AOT autograd caches are on by default in torch >= 2.5 and are
    switched on here for older ones.
    """
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    p = Path(path).expanduser()
    p.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(p)
    os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")
    return p


@dataclass
class CompileReport:
    compiled: int = 0  # blocks compiled
    fallback: str | None = None  # why compile was dropped, when it was
    compile_s: float = 0.0  # wall seconds of the first (compiling) step, on its own
    warnings: list[str] = field(default_factory=list)


def compile_blocks(blocks: list[nn.Module], *, dynamic: bool = False, backend="inductor") -> int:
    """Compile each block in place (``nn.Module.compile``, so state dict keys stay the same). Returns how many."""
    for block in blocks:
        block.compile(dynamic=dynamic, backend=backend)
    return len(blocks)


def undo(blocks: list[nn.Module]) -> None:
    """Back to eager: ``Module.compile`` only sets ``_compiled_call_impl``."""
    for block in blocks:
        block._compiled_call_impl = None


def first_step(step, blocks: list[nn.Module], report: CompileReport, *, sync=lambda: None):
    """Run the first step, which compiles; time it on its own, and fall back to eager once if tracing fails.

    ``step`` is a no-argument callable running one forward and backward. A failure inside dynamo
    or inductor (``torch._dynamo.exc`` errors, inductor's lowering errors) drops compile with one
    warning and reruns the step eagerly; any other error is the user's and propagates.
    """
    start = time.perf_counter()
    try:
        out = step()
        sync()
    except Exception as err:  # noqa: BLE001 - filtered below: only compiler errors fall back
        if not report.compiled or not _from_compiler(err):
            raise
        undo(blocks)
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
        # dynamo's first line is often a header ("backend='x' raised:"): keep the cause's line with it
        report.fallback = f"{type(err).__name__}: {' '.join(lines[:2])}"[:240]
        report.warnings.append(f"torch.compile failed on this model ({report.fallback}); training eagerly")
        report.compiled = 0
        out = step()
        sync()
    report.compile_s = time.perf_counter() - start
    return out


def _from_compiler(err: BaseException) -> bool:
    """True for errors raised by dynamo, AOT autograd or inductor (including wrapped ones)."""
    seen = 0
    while err is not None and seen < 8:
        mod = type(err).__module__ or ""
        if mod.startswith(("torch._dynamo", "torch._inductor", "torch._functorch", "torch.fx")):
            return True
        err = err.__cause__ or err.__context__
        seen += 1
    return False
