"""Command-line arguments to planner requests: the checks a user's flags need, in one place."""

from __future__ import annotations

from rubin.errors import UsageError, bad_value
from rubin.plan import shapes


def model_shape(args) -> shapes.ModelShape:
    if args.seq_len is not None and args.seq_len <= 0:  # 0 must not fall back to the model's context
        raise bad_value("seq-len", args.seq_len, "a positive number of tokens per sample", "e.g. --seq-len 2048")
    if getattr(args, "measure", False):
        return measured_shape(args)
    if getattr(args, "import_path", None):
        raise UsageError("--import plans your own model by measuring it: add --measure")
    given = [n for n in ("workload", "config", "params") if getattr(args, n, None) is not None]
    flags = any(getattr(args, n, None) is not None for n in ("hidden", "layers", "heads"))
    if len(given) > 1 or (given and given[0] != "workload" and flags):
        raise UsageError(f"give the model once: one of --workload, --config, --params or --hidden/--layers/--heads "
                         f"(got {', '.join('--' + g for g in given)}{' and shape flags' if flags else ''})")
    if args.workload:
        from rubin.plan.reference_shapes import workload

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


def measured_shape(args) -> shapes.ModelShape:
    """``--measure``: build the model, run small real steps, fit its activations (``plan.fit``)."""
    from rubin.errors import load_yaml_text
    from rubin.plan import fit

    if bool(args.workload) == bool(args.import_path):
        raise UsageError("--measure needs the model once: --workload NAME or --import MODULE:FACTORY")
    for n in ("config", "params", "hidden", "layers", "heads"):
        if getattr(args, n, None) is not None:
            raise UsageError(f"--measure builds the model itself: drop --{n}")
    model_args = {}
    for item in args.model_arg:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise bad_value("model-arg", item, "KEY=VALUE", "e.g. --model-arg n_layer=12")
        model_args[key] = load_yaml_text(value, f"--model-arg {key}")
    task = args.task
    if args.workload:
        from rubin.workloads import MODELS

        if args.workload not in MODELS:
            from rubin.errors import bad_choice

            raise bad_choice("workload", args.workload, MODELS)
        task = task or ("lm" if args.workload in ("gpt", "llama") else "classification")
    task = task or ("lm" if args.vocab else "classification")
    vocab = args.vocab or (50304 if args.workload in ("gpt", "llama") else None)
    src = fit.Source(workload=args.workload, factory=args.import_path, model_args=model_args, task=task, vocab=vocab,
                     seq_len=args.seq_len or (1024 if task == "lm" else None),
                     image_shape=(args.channels, args.image_size, args.image_size), classes=args.classes)
    return fit.measure_shape(src, precision=args.precision, device_want=args.measure_device)


def topology(gpus: int | None, per_node: int | None, nodes: int | None) -> tuple[int, int]:
    """(gpus_per_node, nodes) from any two of --gpus, --gpus-per-node, --nodes."""
    for name, v in (("gpus", gpus), ("gpus-per-node", per_node), ("nodes", nodes)):
        if v is not None and v <= 0:
            raise bad_value(name, v, "a positive integer")
    if gpus is None:
        return per_node or 8, nodes or 1
    if per_node is None and nodes is None and gpus > 8 and gpus % 8:
        fits = [d for d in range(8, 0, -1) if gpus % d == 0]
        raise bad_value("gpus", gpus, "a multiple of the default 8 GPUs per node, or --gpus-per-node that divides it",
                        f"pass --gpus-per-node {fits[0]} ({gpus // fits[0]} nodes)"
                        + "".join(f" or {d} ({gpus // d} nodes)" for d in fits[1:3]))
    if per_node is None:
        per_node = gpus // nodes if nodes else min(gpus, 8)
    if nodes is None:
        nodes = max(gpus // per_node, 1)
    if per_node * nodes != gpus:
        divisors = [d for d in range(min(gpus, 8), 0, -1) if gpus % d == 0]
        raise bad_value("gpus", gpus, f"--gpus-per-node x --nodes (here {per_node} x {nodes} = {per_node * nodes})",
                        f"pass --gpus-per-node {divisors[0]} with --nodes {gpus // divisors[0]}, or drop --nodes")
    return per_node, nodes


def memory_request(args):
    from rubin.plan.memory import MemoryRequest
    from rubin.plan.target import gpu_memory

    model = model_shape(args)
    per_node, nodes = topology(args.gpus, args.gpus_per_node, args.nodes)
    if args.gpu and args.gpu_memory_gib is not None:
        raise UsageError("give the GPU once: --gpu NAME or --gpu-memory-gib SIZE")
    name, size, notes = gpu_memory(args.gpu, args.gpu_memory_gib)
    host = args.host_memory_gib
    if host is None:
        host = detected_host_memory_gib()
        if host is not None:
            notes.append(f"host memory per node: {host:.0f} GiB, detected on this machine (CPU offload must fit "
                         "there); pass --host-memory-gib for the target's nodes")
    if model.kind == "params":
        notes.append("raw parameter count: activations are not counted; give --workload, --config or a shape for them")
    if model.kind in ("cnn", "mlp") and args.activation_checkpointing != "none":
        notes.append("activation checkpointing is not modeled for CNN/MLP workloads: activations shown without it")
    return MemoryRequest(model=model, gpu_memory_bytes=size, gpu_name=name, micro_batch=args.micro_batch,
                         gpus_per_node=per_node, nodes=nodes, precision=args.precision, optimizer=args.optimizer,
                         checkpointing=args.activation_checkpointing, flash=args.flash_attention,
                         usable_fraction=args.usable_fraction, overhead_gib=args.overhead_gib,
                         conservative=args.conservative, host_memory_gib=host, notes=notes,
                         grad_accumulation=args.grad_accumulation, fused_loss=bool(getattr(args, "fused_loss", False)))


def detected_host_memory_gib() -> float | None:
    """This machine's physical memory (sysconf; no psutil), or None where the OS does not say."""
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return None


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
