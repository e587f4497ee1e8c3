"""Ground truth for the memory planner: one real training step, measured.

Two numbers per step, both from the real thing, not from a formula:

- ``saved_bytes``: what autograd keeps for backward, from ``torch.autograd.graph.saved_tensors_hooks``,
  counted once per storage (views and re-saves of one tensor share a storage) and without the
  parameters and their autocast copies, which are model states, not activations.
- ``peak_bytes``: the allocator's peak across forward, backward, the optimizer step and zero_grad,
  from a steady state (weights and optimizer moments resident, gradients freed). On CUDA this is
  ``max_memory_allocated`` through the device seam; on the CPU there is no allocator counter, so the
  profiler's memory events (every allocation and free the CPU allocator reports) are summed in order.

The step is the one ``rubin train`` runs: ``rubin.workloads.contract.outputs.loss_fn``, AdamW, activation
checkpointing by patching each block's ``forward`` as ``train/strategy.py`` does.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

# op name in the profiler -> the attention kernel it means
_ATTENTION = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash attention (CPU)",
    "aten::_scaled_dot_product_flash_attention": "flash attention",
    "aten::_scaled_dot_product_efficient_attention": "memory-efficient attention",
    "aten::_scaled_dot_product_cudnn_attention": "cuDNN attention",
    "aten::_scaled_dot_product_attention_math": "math attention (materialises the s x s scores)",
}
@dataclass
class StepMeasurement:
    saved_bytes: float  # autograd's saved activations, deduplicated by storage
    peak_bytes: float  # allocator peak over the whole step, absolute (states included)
    backward_peak_bytes: float  # the same over forward and backward only (before the optimizer step)
    resident_bytes: float  # before the step: weights, buffers, optimizer state
    device: str
    kernel: str  # the attention kernel the step used ("none" for a model without attention)
    cuda_differences: list[str] = field(default_factory=list)  # where CUDA autocast would differ


def _storage_key(t) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.nbytes()


def _from_parameter(t, params: set) -> bool:
    """A parameter, a view of one, or its autocast copy (ToCopy of a leaf): a model state."""
    if _storage_key(t)[0] in params:
        return True
    fn = t.grad_fn
    for _ in range(6):
        if fn is None:
            return False
        name = type(fn).__name__
        if name == "AccumulateGrad":
            return True
        if not name.startswith(("ToCopyBackward", "TBackward", "ViewBackward", "PermuteBackward", "TransposeBackward",
                                "ExpandBackward", "UnsqueezeBackward", "AliasBackward", "UnsafeViewBackward")):
            return False
        nxt = [f for f, _ in fn.next_functions if f is not None]
        if len(nxt) != 1:
            return False
        fn = nxt[0]
    return False


@contextlib.contextmanager
def count_saved(params: set, into: dict):
    """Record every tensor autograd saves (outside ``params``) as storage -> bytes in ``into``."""
    import torch

    def pack(t):
        if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes() and not _from_parameter(t, params):
            key = _storage_key(t)
            into[key] = key[1]
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield


def forward_saved(model, x, y, *, task: str, precision: str = "fp32", checkpointing: bool = False, blocks=None,
                  call=None, ops: bool = False) -> tuple[float, list]:
    """Saved bytes of one forward (and the loss), without backward or an optimizer: what autograd keeps
    is fixed once forward is done, so this is a third of a step. ``ops``: also return (op name, dtypes)."""
    import torch

    from rubin.workloads.contract.outputs import loss_fn

    if checkpointing:
        from rubin.workloads.contract.blocks import apply_activation_checkpointing

        apply_activation_checkpointing(list(blocks or []))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    model.train()
    params = {_storage_key(p)[0] for p in model.parameters()}
    saved: dict = {}
    names: list = []
    prof = contextlib.nullcontext()
    if ops:
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True)
    ctx = torch.autocast(x.device.type, dtype=dtype) if dtype else contextlib.nullcontext()
    with prof as p, count_saved(params, saved), ctx:
        loss = loss_fn(task, (call or model)(x), y)  # loss_fn finds the logits in any output
    if ops:
        names = [(e.name(), e.dtypes(), e.shapes()) for e in p.profiler.kineto_results.events()]
    del loss
    return float(sum(saved.values())), names


def kernel_of(names: list) -> str:
    return next((_ATTENTION[n[0]] for n in names if n[0] in _ATTENTION), "none")


# The innermost ops that save a tensor of their input's size and that CUDA's autocast runs in fp32
# (aten/src/ATen/autocast_mode.cpp: softmax, log_softmax, layer_norm are on CUDA's fp32 list, not the
# CPU's): where the CPU ran them in 16 bit, that tensor is 4 bytes per element on CUDA, not 2.
_CUDA_FP32_SAVES = ("aten::_log_softmax", "aten::_softmax", "aten::native_layer_norm")


def cuda_correction(names: list) -> float:
    """Bytes CUDA would save on top of what a CPU autocast forward saved (2 per element, see above)."""
    import math

    low = {"BFloat16", "Half", "c10::BFloat16", "c10::Half"}
    extra = 0.0
    for n in names:
        if n[0] in _CUDA_FP32_SAVES and n[1] and str(n[1][0]) in low and len(n) > 2 and n[2]:
            extra += 2.0 * math.prod(n[2][0])
    return extra


def cuda_differences(names: list, precision: str) -> list[str]:
    """Ops CUDA's autocast would run in fp32 that ran in 16 bit here (CPU autocast only)."""
    if precision not in ("bf16", "fp16"):
        return []
    low = {"BFloat16", "Half", "c10::BFloat16", "c10::Half"}
    # the innermost op: an autocast wrapper records the 16-bit input before it casts
    seen = sorted({n[0] for n in names if n[0] in _CUDA_FP32_SAVES and n[1] and str(n[1][0]) in low})
    return [f"{n} ran in 16-bit on the CPU; CUDA autocast runs it in fp32" for n in seen]


def resident_bytes(model, optimizer) -> float:
    seen = {}
    for t in list(model.parameters()) + list(model.buffers()):
        seen[_storage_key(t)] = _storage_key(t)[1]
    for state in optimizer.state.values():
        for v in state.values():
            if hasattr(v, "untyped_storage") and v.device.type != "meta":
                seen[_storage_key(v)] = _storage_key(v)[1]
    return float(sum(seen.values()))


def measure_step(model, x, y, *, task: str, precision: str = "fp32", checkpointing: bool = False,
                 blocks=None, device=None, wrap=None) -> StepMeasurement:
    """Train ``model`` (already on ``device``) one warm-up step, then measure the next one.

    ``precision``: fp32, bf16 or fp16 (autocast over fp32 weights, as ``rubin train``). The optimizer
    is AdamW with ``foreach=True``, what torch picks on CUDA (on the CPU it would loop per tensor).
    ``wrap(model)`` returns the module to call (e.g. a DDP wrapper); its buffers count as resident.
    """
    import torch

    from rubin.platform import device as dev
    from rubin.workloads.contract.outputs import loss_fn

    device = device or x.device
    if checkpointing:
        from rubin.workloads.contract.blocks import apply_activation_checkpointing

        apply_activation_checkpointing(list(blocks or []))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    params = {_storage_key(p)[0] for p in model.parameters()}
    before = resident_bytes(model, opt)  # weights and buffers (no optimizer state yet)
    marks: dict = {}
    runner = model

    def step(saved: dict | None):
        ctx = torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()
        hooks = count_saved(params, saved) if saved is not None else contextlib.nullcontext()
        with hooks, ctx:
            loss = loss_fn(task, runner(x), y)
        loss.backward()
        del loss
        if device.type == "cuda" and saved is not None:
            dev.synchronize(device)
            marks["backward"] = float(dev.peak_memory_bytes(device))
        with torch.profiler.record_function("rubin.optimizer_step"):
            opt.step()
        opt.zero_grad(set_to_none=True)

    saved: dict = {}
    if device.type == "cuda":
        start = dev.allocated_bytes(device) - before  # what was there besides the weights (inputs)
        runner = wrap(model) if wrap else model
        step(None)  # creates the optimizer moments: the measured step starts from the steady state
        dev.synchronize(device)
        resident = float(dev.allocated_bytes(device) - start)
        dev.reset_peak_memory(device)
        with _ops() as ops:
            step(saved)
        dev.synchronize(device)
        peak = float(dev.peak_memory_bytes(device)) - start
        backward_peak = marks["backward"] - start
        names = ops()
    else:
        import gc

        from torch.profiler import ProfilerActivity, profile

        # one window from the wrap to the end of the measured step: the allocator's running total at the
        # start of the measured step is what the wrap and the warm-up step left (optimizer moments, DDP's
        # buckets), whatever the order in which their temporaries were freed. The allocator reports the
        # free of a block allocated under an earlier profiler too, so older garbage is collected first
        # and the collector is held off inside the window.
        gc.collect()
        gc.disable()
        try:
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True) as prof:
                runner = wrap(model) if wrap else model
                step(None)
                with torch.profiler.record_function("rubin.measured_step"):
                    step(saved)
        finally:
            gc.enable()
        events = sorted(prof.profiler.kineto_results.events(), key=lambda e: e.start_ns())
        measured = [e for e in events if e.name() == "rubin.measured_step"][-1]
        t0, t1 = measured.start_ns(), measured.end_ns()
        opt_start = max((e.start_ns() for e in events if e.name() == "rubin.optimizer_step"), default=t1)
        level = base = top = top_backward = 0
        for e in events:
            if e.name() != "[memory]":
                continue
            if e.start_ns() < t0:
                level += e.nbytes()
                base = level
                continue
            level += e.nbytes()
            top = max(top, level)
            if e.start_ns() < opt_start:
                top_backward = max(top_backward, level)
        resident = before + base
        peak, backward_peak = before + max(top, base), before + max(top_backward, base)
        names = [(e.name(), e.dtypes(), e.shapes()) for e in events if e.name() != "[memory]" and t0 <= e.start_ns() <= t1]
    kernel = kernel_of(names)
    diffs = cuda_differences(names, precision) if device.type == "cpu" else []
    return StepMeasurement(float(sum(saved.values())), peak, backward_peak, resident, device.type, kernel, diffs)


@contextlib.contextmanager
def _ops():
    """The aten op names of a step (for the attention kernel), without memory profiling."""
    from torch.profiler import ProfilerActivity, profile

    names: list = []
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        yield lambda: names
    names.extend((e.name(), e.dtypes(), e.shapes()) for e in prof.profiler.kineto_results.events())
