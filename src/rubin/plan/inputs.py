"""Command-line arguments to planner requests: the checks a user's flags need, in one place."""

from __future__ import annotations

from rubin.errors import UsageError, bad_value
from rubin.plan import model as shapes


def model_shape(args) -> shapes.ModelShape:
    given = [n for n in ("workload", "config", "params") if getattr(args, n, None) is not None]
    flags = any(getattr(args, n, None) is not None for n in ("hidden", "layers", "heads"))
    if len(given) > 1 or (given and given[0] != "workload" and flags):
        raise UsageError(f"give the model once: one of --workload, --config, --params or --hidden/--layers/--heads "
                         f"(got {', '.join('--' + g for g in given)}{' and shape flags' if flags else ''})")
    if args.workload:
        from rubin.plan.workloads import workload

        if flags:
            raise UsageError("--workload takes its shape from the workload code; drop --hidden/--layers/--heads "
                             "or drop --workload")
        return workload(args.workload, seq_len=args.seq_len, image_size=args.image_size,
                        channels=args.channels, classes=args.classes)
    if args.config:
        return shapes.from_hf_config(args.config).with_seq_len(args.seq_len)
    if args.params is not None:
        return shapes.raw(args.params, args.largest_layer_params)
    if flags:
        missing = [n for n in ("hidden", "layers", "heads") if getattr(args, n) is None]
        if missing:
            raise UsageError(f"a transformer shape needs --hidden, --layers and --heads; missing --{missing[0]}")
        if args.seq_len is None:
            raise bad_value("seq-len", None, "the tokens per sample of a transformer", "pass --seq-len 2048")
        return shapes.transformer(layers=args.layers, hidden=args.hidden, heads=args.heads, kv_heads=args.kv_heads,
                                  ffn=args.ffn, vocab=args.vocab, seq_len=args.seq_len, gated_mlp=args.swiglu,
                                  dropout=False, learned_positions=False, bias=not args.swiglu,
                                  tied_embeddings=not args.swiglu)
    raise UsageError("no model: pass --workload gpt, --config config.json, --params 7e9, or --hidden/--layers/--heads")


def topology(gpus: int | None, per_node: int | None, nodes: int | None) -> tuple[int, int]:
    """(gpus_per_node, nodes) from any two of --gpus, --gpus-per-node, --nodes."""
    for name, v in (("gpus", gpus), ("gpus-per-node", per_node), ("nodes", nodes)):
        if v is not None and v <= 0:
            raise bad_value(name, v, "a positive integer")
    if gpus is None:
        return per_node or 8, nodes or 1
    if per_node is None:
        per_node = gpus // nodes if nodes else min(gpus, 8)
    if nodes is None:
        nodes = max(gpus // per_node, 1)
    if per_node * nodes != gpus:
        raise bad_value("gpus", gpus, f"a multiple of --gpus-per-node {per_node} equal to --gpus-per-node x --nodes",
                        f"use e.g. --gpus {max(per_node * max(nodes, 1), per_node)} or set --gpus-per-node")
    return per_node, nodes


def memory_request(args):
    from rubin.plan.memory import MemoryRequest
    from rubin.plan.target import gpu_memory

    model = model_shape(args)
    per_node, nodes = topology(args.gpus, args.gpus_per_node, args.nodes)
    if args.gpu and args.gpu_memory_gib is not None:
        raise UsageError("give the GPU once: --gpu NAME or --gpu-memory-gib SIZE")
    name, size, notes = gpu_memory(args.gpu, args.gpu_memory_gib)
    if model.kind == "params":
        notes.append("raw parameter count: activations are not counted; give --workload, --config or a shape for them")
    if model.kind in ("cnn", "mlp") and args.activation_checkpointing != "none":
        notes.append("activation checkpointing is not modeled for CNN/MLP workloads: activations shown without it")
    return MemoryRequest(model=model, gpu_memory_bytes=size, gpu_name=name, micro_batch=args.micro_batch,
                         gpus_per_node=per_node, nodes=nodes, precision=args.precision, optimizer=args.optimizer,
                         checkpointing=args.activation_checkpointing, flash=args.flash_attention,
                         usable_fraction=args.usable_fraction, overhead_gib=args.overhead_gib,
                         conservative=args.conservative, host_memory_gib=args.host_memory_gib, notes=notes)


def throughput(args):
    from rubin.plan import throughput as tp

    given = [n for n in ("throughput", "bench", "summary") if getattr(args, n, None) is not None]
    if len(given) != 1:
        raise UsageError("give the measured throughput once: --throughput N, --bench FILE or --summary RUN"
                         + (f" (got {', '.join('--' + g for g in given)})" if given else ""))
    if args.throughput is not None:
        if args.measured_gpus is None or args.measured_gpus <= 0:
            raise bad_value("measured-gpus", args.measured_gpus, "a positive integer")
        t = tp.by_hand(args.throughput, args.unit, args.measured_gpus, args.measured_gpu, getattr(args, "mfu", None))
    elif args.bench:
        t = tp.from_bench(args.bench, args.bench_workload)
    else:
        t = tp.from_summary(args.summary)
    if args.measured_gpu and t.gpu is None:
        t.gpu = tp._gpu_key(args.measured_gpu)
    if args.tokens_per_sample:
        t.tokens_per_sample = args.tokens_per_sample
    return t


def cost_request(args):
    from rubin.plan import prices
    from rubin.plan.cost import CostRequest, parse_scaling, work_amount

    if args.unit not in ("samples", "tokens"):
        raise bad_value("unit", args.unit, "samples or tokens")
    job_gpus = args.job_gpus if args.job_gpus is not None else getattr(args, "gpus", None)
    job_nodes = args.job_nodes if args.job_nodes is not None else getattr(args, "nodes", None)
    if job_gpus is not None and job_nodes is not None:
        job_nodes = None  # GPUs decide; nodes follow each instance's size
    return CostRequest(throughput=throughput(args), work=work_amount(args.work, args.epochs, args.dataset_size),
                       unit=args.unit, prices=prices.load(args.prices), checkpoint_s=args.checkpoint_seconds,
                       emergency_save_s=args.emergency_checkpoint_seconds, nodes=job_nodes, gpus=job_gpus,
                       scaling_efficiency=args.scaling_efficiency, scaling_points=parse_scaling(args.scaling),
                       rank_by=args.rank_by, deadline_hours=args.deadline_hours,
                       delay_cost_per_hour=args.delay_cost_per_hour, mc_runs=args.mc_runs, seed=args.seed,
                       dtype=args.dtype, mfu=args.mfu)


def projections(args) -> dict:
    from rubin.plan.projection import project, projection_error

    t = throughput(args)
    out = []
    for target in args.targets:
        p = project(t, target, dtype=args.dtype, mfu=args.mfu, intensity=args.arithmetic_intensity,
                    bound_fraction=args.bound_fraction)
        if args.actual is not None:
            p["error"] = projection_error(p, args.actual)
        out.append(p)
    return {"schema_version": 1, "kind": "rubin.plan.project",
            "measured": {"gpu": t.gpu, "per_gpu_throughput": t.per_gpu, "unit": t.unit, "source": t.source, "mfu": t.mfu},
            "projections": out}
