"""Planned against measured, case by case: the memory planner's accuracy check.

Each case builds a reference model the way ``rubin train`` does, measures one real step
(``plan/measure.py``: autograd's saved bytes and the allocator peak), and asks the planner for the
same setup on one device with no overhead. The tests in ``tests/plan`` assert the errors;
``benchmarks/plan_accuracy.py`` prints the table (``--device cuda`` on a GPU).
"""

from __future__ import annotations

from dataclasses import dataclass, field

GPT_124M = {"n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50304}
GPT_SMALL = {"n_layer": 2, "n_head": 4, "n_embd": 128, "vocab_size": 1000}


@dataclass(frozen=True)
class Case:
    model: str  # gpt, vit, resnet, mlp
    micro_batch: int
    precision: str = "fp32"  # fp32 or amp-bf16
    checkpointing: bool = False
    seq_len: int = 0  # gpt
    image: tuple[int, int, int] = (3, 32, 32)  # vit, resnet, mlp
    args: dict = field(default_factory=dict)
    ddp: bool = False  # wrap in DistributedDataParallel (needs an initialised process group)


def _label(c: Case) -> str:
    size = f"seq {c.seq_len}" if c.model == "gpt" else f"{c.image[1]}px"
    name = {"gpt": "GPT-124M" if c.args.get("n_embd") == 768 else "GPT-small"}.get(c.model, c.model)
    if c.model == "resnet":
        name = f"ResNet-{c.args.get('layout', 18)}"
    return (f"{name} {size} b{c.micro_batch} {c.precision}" + (" +AC" if c.checkpointing else "")
            + (" DDP" if c.ddp else ""))


def _shape(c: Case):
    from rubin.plan import reference_shapes, shapes

    if c.model == "gpt":
        a = c.args
        return shapes.transformer(name="gpt", layers=a["n_layer"], hidden=a["n_embd"], heads=a["n_head"],
                                  vocab=a["vocab_size"], seq_len=c.seq_len, dropout=False)
    ch, h, _ = c.image
    if c.model == "resnet":
        return reference_shapes.workload(f"resnet{c.args.get('layout', 18)}", image_size=h, channels=ch, classes=10)
    return reference_shapes.workload(c.model, image_size=h, channels=ch, classes=10)


def _build(c: Case, device):
    import torch

    from rubin.workloads import DataInfo, build_model

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    if c.model == "gpt":
        info = DataInfo.lm(c.seq_len, c.args["vocab_size"])
        model = build_model("gpt", {**c.args, "block_size": c.seq_len}, info)
        x = torch.randint(0, c.args["vocab_size"], (c.micro_batch, c.seq_len), generator=g)
        y = torch.randint(0, c.args["vocab_size"], (c.micro_batch, c.seq_len), generator=g)
        return model.to(device), x.to(device), y.to(device), "lm"
    info = DataInfo.classification(c.image, 10)
    model = build_model(c.model, dict(c.args), info)
    x = torch.randn(c.micro_batch, *c.image, generator=g)
    y = torch.randint(0, 10, (c.micro_batch,), generator=g)
    return model.to(device), x.to(device), y.to(device), "classification"


def run(c: Case, device=None) -> dict:
    """One case: planned and measured saved bytes and step peak, and their errors."""
    import torch

    from rubin import workloads
    from rubin.plan import GIB
    from rubin.plan.measure import measure_step
    from rubin.plan.memory import MemoryRequest, evaluate
    from rubin.platform import device as dev

    device = device or torch.device("cpu")
    model, x, y, task = _build(c, device)
    wrap = None
    if c.ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [device.index] if device.type == "cuda" else None
        # init_sync=False: a 1-rank group has nothing to broadcast, and gloo can free the broadcast's flat
        # copy of the weights on its own thread, where the CPU profiler does not see the free (the
        # measured resident bytes then hold one copy of the weights too many, under load)
        wrap = lambda m: DDP(m, device_ids=ids, init_sync=False)  # noqa: E731
    m = measure_step(model, x, y, task=task, precision="bf16" if c.precision == "amp-bf16" else "fp32",
                     checkpointing=c.checkpointing, blocks=workloads.model_blocks(model), device=device, wrap=wrap)
    cc = dev.capability(device) if device.type == "cuda" else None
    req = MemoryRequest(model=_shape(c), micro_batch=c.micro_batch, gpus_per_node=1, nodes=1, precision=c.precision,
                        checkpointing="full" if c.checkpointing else "none", overhead_gib=0.0,
                        gpu_memory_bytes=1024 * GIB, library_workspace_bytes=None if cc else 0.0,
                        compute_capability=f"{cc[0]}.{cc[1]}" if cc else None)
    row = evaluate(req, "ddp" if c.ddp else "single")
    planned_saved = row["activations"]["saved_bytes"]
    return {"case": _label(c), "device": device.type, "kernel": m.kernel,
            "planned_saved": planned_saved, "measured_saved": m.saved_bytes,
            "saved_error": planned_saved / m.saved_bytes - 1 if m.saved_bytes else 0.0,
            "planned_peak": row["total_bytes"], "measured_peak": m.peak_bytes,
            "peak_error": row["total_bytes"] / m.peak_bytes - 1, "peak_phase": row["peak_phase"],
            "planned_buckets": row["model_states"]["ddp_bucket_bytes"],
            "measured_wrapper": m.resident_bytes - _states_bytes(model)}


def _states_bytes(model) -> float:
    """Weights + AdamW's two moments, as allocated (the resident bytes without a wrapper's buffers)."""
    params = dict((p.data_ptr(), p.numel() * p.element_size()) for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    return 3.0 * sum(params.values()) + buffers


# The CPU cases: small enough for CI on a shared CPU, large enough that each phase of the step peaks somewhere.
CPU_CASES = {
    "gpt-small-fp32": Case("gpt", 8, "fp32", seq_len=256, args=GPT_SMALL),
    "gpt-small-bf16": Case("gpt", 8, "amp-bf16", seq_len=256, args=GPT_SMALL),
    "gpt-small-fp32-ac": Case("gpt", 8, "fp32", True, seq_len=256, args=GPT_SMALL),
    "gpt-small-bf16-ac": Case("gpt", 8, "amp-bf16", True, seq_len=256, args=GPT_SMALL),
    "gpt-124m-fp32": Case("gpt", 1, "fp32", seq_len=64, args=GPT_124M),
    "vit-fp32": Case("vit", 32, "fp32"),
    "vit-bf16": Case("vit", 32, "amp-bf16"),
    "vit-bf16-ac": Case("vit", 32, "amp-bf16", True),
    "mlp-fp32": Case("mlp", 64, "fp32"),
    "mlp-bf16": Case("mlp", 64, "amp-bf16"),
}
# On a GPU (benchmarks/plan_accuracy.py --device cuda): the models in bf16, against max_memory_allocated.
GPU_CASES = {
    "gpt-124m-bf16": Case("gpt", 8, "amp-bf16", seq_len=1024, args=GPT_124M),
    "gpt-124m-bf16-ac": Case("gpt", 8, "amp-bf16", True, seq_len=1024, args=GPT_124M),
    "vit-bf16": Case("vit", 256, "amp-bf16"),
    "resnet50-bf16": Case("resnet", 64, "amp-bf16", image=(3, 224, 224), args={"layout": 50}),
}
