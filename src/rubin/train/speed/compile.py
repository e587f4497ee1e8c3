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
    """What was asked (``compiled`` blocks) and what dynamo really did, from its own counters.

    ``frames``/``graphs``: frames dynamo converted and graphs it captured since this run's compile began;
    ``frames_eager``: frames it gave up on and ran eagerly (unsupported code, the recompile limit);
    ``recompiles``: frames converted after the first step (evaluation's no-grad graphs, new shapes).
    """

    compiled: int = 0  # blocks marked for compile
    fallback: str | None = None  # why (some of) compile was dropped, when it was
    compile_s: float = 0.0  # wall seconds of the first (compiling) step, on its own
    warnings: list[str] = field(default_factory=list)
    frames: int = 0
    graphs: int = 0
    frames_eager: int = 0
    recompiles: int = 0
    _base: dict = field(default_factory=dict, repr=False)
    _after_first: int | None = field(default=None, repr=False)

    def start(self) -> None:
        """Before the first compiled call: dynamo's counters are per process, so this run counts from here."""
        self._base = dynamo_counts()

    def read(self, *, first_step: bool = False, traced: bool = True) -> list[str]:
        """Update the figures from dynamo's counters; returns the warnings that are new (each said once)."""
        now = dynamo_counts()
        base = self._base or {k: 0 for k in now}
        total = now["frames_total"] - base["frames_total"]
        self.frames = now["frames_ok"] - base["frames_ok"]
        self.graphs = now["graphs"] - base["graphs"]
        eager_before, self.frames_eager = self.frames_eager, total - self.frames
        if first_step:
            self._after_first = total
        self.recompiles = total - self._after_first if self._after_first is not None else 0
        new = []
        if self.compiled and first_step and not traced and total == 0:
            self.fallback = self.fallback or "dynamo traced no frame of the compiled blocks"
            new.append(f"torch.compile traced nothing in the {self.compiled} compiled blocks; they run eagerly")
        if self.frames_eager and not eager_before and self.fallback is None:  # a fallback said already covers it
            self.fallback = f"dynamo ran {self.frames_eager} frame(s) eagerly"
            new.append(f"torch.compile fell back to eager for {self.frames_eager} frame(s) (unsupported code or "
                       "torch._dynamo.config.recompile_limit reached); set TORCH_LOGS=recompiles,graph_breaks to see why")
        self.warnings.extend(new)
        return new

    def as_dict(self) -> dict:
        return {"blocks": self.compiled, "frames": self.frames, "graphs": self.graphs, "recompiles": self.recompiles,
                "frames_eager": self.frames_eager, "compile_s": round(self.compile_s, 3), "fallback": self.fallback}


def dynamo_counts() -> dict:
    """Frames dynamo was asked to convert, those it converted, and graphs it captured, in this process."""
    from torch._dynamo.utils import counters

    return {"frames_total": int(counters["frames"]["total"]), "frames_ok": int(counters["frames"]["ok"]),
            "graphs": int(counters["stats"]["unique_graphs"])}


def compile_blocks(blocks: list[nn.Module], *, dynamic: bool | None = None, backend="inductor") -> int:
    """Compile each block in place (``nn.Module.compile``, so state dict keys stay the same). Returns how many.

    ``dynamic=None`` (dynamo's automatic dynamic shapes): static graphs first, and a dimension whose size
    changes (a partial last eval batch, a user's variable-length batches) is made dynamic at its first
    recompile. ``dynamic=False`` compiled one static graph per new shape instead, until the recompile
    limit (8) made dynamo run that code eagerly for the rest of the run.
    """
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
    report.start()
    try:
        out = step()
        sync()
    except Exception as err:  # noqa: BLE001 - filtered below: only compiler errors fall back
        if not report.compiled or not from_compiler(err):
            raise
        fall_back(blocks, report, err)
        report.start()  # the failed attempt's frames are not this run's eager frames: the warning above says it
        out = step()
        sync()
    report.compile_s = time.perf_counter() - start
    # no new frame may still be compiled code: an earlier run in this process traced the same blocks
    traced = any(_cached(b) for b in blocks)
    report.read(first_step=True, traced=traced)
    if report.compiled and not traced and report.frames == 0:  # nothing compiled: the summary says so, and
        undo(blocks)                                             # dynamo's frame hook, which only costs time, goes
        report.compiled = 0
    return out


def fall_back(blocks: list[nn.Module], report: CompileReport, err: BaseException, during: str | None = None) -> str:
    """Back to eager for the rest of the run after a compiler error ERR (DURING a phase other than the first
    step: "evaluation"); returns the one warning, also kept in ``report.warnings``."""
    undo(blocks)
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    # dynamo's first line is often a header ("backend='x' raised:"): keep the cause's line with it
    cause = f"{type(err).__name__}: {' '.join(lines[:2])}"[:240]
    report.fallback = f"during {during}: {cause}" if during else cause
    where = f"during {during}" if during else "on this model"
    report.warnings.append(f"torch.compile failed {where} ({cause}); training eagerly")
    report.compiled = 0
    return report.warnings[-1]


def _cached(block: nn.Module) -> bool:
    """Whether dynamo holds compiled code for BLOCK's forward (its cache entries on that code object)."""
    fn = getattr(block.forward, "__func__", block.forward)
    code = getattr(fn, "__code__", None)  # a functools.partial has none: dynamo never starts a frame there
    if code is None:
        return False
    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    except ImportError:  # a torch without it: trust the frame counter alone (it only misses an earlier run's cache)
        return True
    return bool(_debug_get_cache_entry_list(code))


def from_compiler(err: BaseException) -> bool:
    """True for errors raised by dynamo, AOT autograd or inductor (including wrapped ones)."""
    seen = 0
    while err is not None and seen < 8:
        mod = type(err).__module__ or ""
        if mod.startswith(("torch._dynamo", "torch._inductor", "torch._functorch", "torch.fx")):
            return True
        err = err.__cause__ or err.__context__
        seen += 1
    return False
