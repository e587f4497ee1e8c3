"""What ``rubin train`` does to go fast on a GPU, decided once at setup: fp8 layers, the fused loss,
regional compile (with its cache and its timed first step), and the prefetching data path.

Each choice is ``auto`` by default and is made from the device and the model: on a CPU every one of
them is off (they cost more there than they save), so the CPU loop is the plain one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rubin.errors import UsageError
from rubin.platform import device as dev
from rubin.train.speed import compile as comp


@dataclass
class Speedups:
    compile: bool = False
    head: object = None  # the FusedHead when the fused loss is on
    fp8_layers: list[str] = field(default_factory=list)
    report: comp.CompileReport = field(default_factory=comp.CompileReport)
    pending_first_step: bool = False

    def summary(self) -> dict:
        """What really ran: compile's figures come from dynamo's counters (read by ``note_fallbacks``)."""
        return {"compile": self.report.as_dict(), "fused_loss": self.head is not None,
                "fused_loss_impl": getattr(self.head, "impl", None), "fp8_layers": len(self.fp8_layers)}


def prepare(cfg, model, device, task: str, run_path: Path | None, *, micro_batch: int = 16,
            tokens_per_sample: int | None = None, warn=lambda message: None) -> Speedups:
    """Convert and mark ``model`` in place (before the strategy wraps it) and return the decisions.
    MICRO_BATCH and TOKENS_PER_SAMPLE size fp8's matmuls; WARN takes a warning line."""
    out = Speedups()
    if cfg.precision == "fp8":
        from rubin.train.speed import fp8

        out.fp8_layers = fp8.convert(model, device, micro_batch=micro_batch,
                                     tokens_per_sample=tokens_per_sample if task == "lm" else None, warn=warn)
    out.head = _fused_head(cfg.model.fused_loss, model, device, task)
    out.compile = comp.wanted(cfg.distributed.compile, device)
    if out.compile:
        # a requeued or resumed run finds its compiled graphs again (an explicit TORCHINDUCTOR_CACHE_DIR wins)
        comp.use_cache_dir((run_path / "compile-cache") if run_path is not None else Path(".rubin-compile-cache"))
        out.pending_first_step = True
    return out


def _fused_head(mode, model, device, task: str):
    """The FusedHead the run's lm_head becomes, or None. ``true``: rubin's chunked loss; ``liger``: Liger-Kernel's
    (CUDA, installed); ``auto``: on CUDA, Liger's when it imports, else rubin's; off on a CPU."""
    from rubin.workloads.fused_loss import find_head, install, liger_missing

    mode = {True: "true", False: "false"}.get(mode, mode)
    if mode == "false":
        return None
    if task != "lm":
        if mode != "auto":
            raise UsageError(f"model.fused_loss={mode}: the fused loss is for next-token (lm) data and this run's task is "
                             f"{task}; set model.fused_loss=auto or false")
        return None
    head, why = find_head(model)
    if head is None:
        if mode != "auto":
            raise UsageError(f"model.fused_loss={mode}: the output head cannot be found ({why}); the fused loss takes over "
                             "a bias-free lm_head Linear (rubin's LMs, Hugging Face causal LMs); set model.fused_loss=false")
        return None
    cuda = getattr(device, "type", None) == "cuda"
    if mode == "liger":
        if not cuda:
            raise UsageError(f"model.fused_loss=liger runs Liger-Kernel's Triton kernels on a CUDA GPU and this run is on "
                             f"{getattr(device, 'type', device)}; use model.fused_loss=true (rubin's chunked loss) here")
        missing = liger_missing()
        if missing:
            raise UsageError(f"model.fused_loss=liger needs Liger-Kernel, which does not import here ({missing}); "
                             "pip install 'rubin[liger]', or use model.fused_loss=auto (rubin's own fused loss)")
        return install(model, impl="liger")
    if mode == "auto" and not cuda:
        return None  # on a CPU the recomputed head matmul costs more than the memory it saves
    return install(model, impl="liger" if mode == "auto" and liger_missing() is None else "rubin")


def first_step(speed: Speedups, step, trainer):
    """Run the loop's STEP; the first one after compiling is timed on its own and falls back to eager
    with one warning if the compiler fails. Its time is left out of throughput and MFU. TRAINER gives
    the compiled blocks (``strategy.compiled``), the optimizer, the device, ``_warn`` and the telemetry."""
    if not speed.pending_first_step:
        return step()
    speed.pending_first_step = False
    blocks = trainer.strategy.compiled
    speed.report.compiled = len(blocks)

    def retryable():
        try:
            return step()
        except Exception:
            trainer.optimizer.zero_grad(set_to_none=True)  # a failed backward may have left some gradients
            raise

    result = comp.first_step(retryable, blocks, speed.report, sync=lambda: dev.synchronize(trainer.info.device))
    for message in speed.report.warnings:
        trainer._warn(message)
    trainer.telemetry.exclude_time(speed.report.compile_s)
    return result


def checked(speed: Speedups, run, trainer, *, during: str):
    """RUN (an evaluation) with compile's fallback outside the first step: a compiler error there drops
    compile for the rest of the run with one warning and runs RUN again eagerly; dynamo's own eager
    fallbacks (the recompile limit) are one warning too. Both go into the summary's ``compile``."""
    if not speed.compile or speed.pending_first_step:
        return run()
    try:
        out = run()
    except Exception as err:  # noqa: BLE001 - filtered: only the compiler's errors fall back
        if not speed.report.compiled or not comp.from_compiler(err):
            raise
        trainer._warn(comp.fall_back(trainer.strategy.compiled, speed.report, err, during))
        out = run()
    note_fallbacks(speed, trainer)
    return out


def note_fallbacks(speed: Speedups, trainer) -> None:
    """Read dynamo's counters into the report; a frame it ran eagerly since the last read is one warning."""
    if speed.compile and not speed.pending_first_step:
        for message in speed.report.read():
            trainer._warn(message)
