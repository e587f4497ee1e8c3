"""``rubin plan memory | cost | project | advise``: will it fit, how long, what will it cost.

Parses arguments, calls ``rubin.plan``, prints (rich tables, or ``--json``). No torch here:
only ``--workload`` imports the workload code (torch) to read the architecture.
"""

from __future__ import annotations

import argparse
import json

from rubin.errors import UsageError


def _memory_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model (one of: --workload, --config, --params, or --hidden/--layers/--heads)")
    g.add_argument("--workload", help="reference workload: gpt, llama, llama1b, llama8b, vit, resnet18, resnet50, mlp")
    g.add_argument("--config", metavar="PATH", help="a Hugging Face style config.json (or its folder)")
    g.add_argument("--params", type=float, help="raw parameter count, e.g. 7e9 (activations are then not counted)")
    g.add_argument("--largest-layer-params", type=float, help="parameters of the largest layer (the ZeRO-3 gathered unit)")
    for name in ("hidden", "layers", "heads", "kv-heads", "ffn", "vocab"):
        g.add_argument(f"--{name}", type=int, help=f"transformer {name.replace('-', ' ')}")
    g.add_argument("--swiglu", action="store_true", help="gated (SwiGLU) MLP, as Llama")
    g.add_argument("--image-size", type=int, default=8, help="vision workloads: image side in pixels (default 8: digits)")
    g.add_argument("--channels", type=int, default=1, help="vision workloads: input channels (default 1)")
    g.add_argument("--classes", type=int, default=10, help="vision workloads: classes (default 10)")
    t = p.add_argument_group("training setup")
    t.add_argument("--seq-len", type=int, help="tokens per sample (default: the model's context)")
    t.add_argument("--micro-batch", type=int, default=1, help="samples per GPU per forward (default 1)")
    t.add_argument("--gpus", type=int, help="total GPUs (default: --gpus-per-node x --nodes)")
    t.add_argument("--gpus-per-node", type=int, help="GPUs per node (default 8, or --gpus when fewer)")
    t.add_argument("--nodes", type=int, help="nodes (default: --gpus / --gpus-per-node)")
    t.add_argument("--precision", default="bf16",
                   help="as in rubin train: bf16 (default) and fp16 are torch.autocast over fp32 weights, fp32; "
                        "planner-only, for jobs trained elsewhere: bf16-mixed and fp16-mixed (16-bit weights + fp32 "
                        "master, DeepSpeed/Megatron), pure-bf16")
    t.add_argument("--optimizer", default="adamw", help="adamw (default, 12 B/param fp32 state), sgd-momentum, sgd, adam8bit")
    t.add_argument("--activation-checkpointing", default="none", help="none (default), selective, full")
    t.add_argument("--fused-loss", action="store_true",
                   help="the chunked head + cross-entropy (rubin train's model.fused_loss, on by default on CUDA for "
                        "gpt, llama and HF causal LMs): no full logits")
    t.add_argument("--flash-attention", action=argparse.BooleanOptionalAction, default=True,
                   help="SDPA/flash attention: no s^2 score matrices (default on)")
    t.add_argument("--conservative", nargs="?", const="deepspeed", default=None, metavar="VERSION",
                   help="model states as DeepSpeed's own estimators count them: deepspeed (default: 0.19.8, ZeRO-1/2 "
                        "2P+18P/N) or deepspeed-legacy (older releases and the docs' example, 4P+16P/N)")
    t.add_argument("--grad-accumulation", type=int, default=1,
                   help="micro-batches per optimizer step (> 1 keeps gradients allocated through forward)")
    t.add_argument("--overhead-gib", type=float, default=2.0, help="CUDA context, NCCL, fragmentation per GPU (default 2)")
    t.add_argument("--usable-fraction", type=float, default=0.9, help="fraction of GPU memory to plan into (default 0.9)")
    t.add_argument("--host-memory-gib", type=float,
                   help="CPU memory per node: CPU offload must fit there too (default: this machine's memory)")
    t.add_argument("--gpu", help="target GPU, a spec catalog key (H100-SXM, H200, GB300, VR200...)")
    t.add_argument("--gpu-memory-gib", type=float, help="target GPU memory in GiB, instead of --gpu")
    ms = p.add_argument_group("measure the model's own activations (--measure)")
    ms.add_argument("--measure", action="store_true",
                    help="run real training steps of the model at small sizes (CPU, or the GPU when there is one), "
                         "fit the activations, and plan with them")
    ms.add_argument("--import", dest="import_path", metavar="MODULE:FACTORY",
                    help="your model, as model.import takes it (e.g. examples.byom.nanogpt:build); needs --measure")
    ms.add_argument("--model-arg", action="append", default=[], metavar="KEY=VALUE",
                    help="an argument for the factory or workload builder (repeatable; values are YAML)")
    ms.add_argument("--task", choices=("lm", "classification"),
                    help="lm (token ids in; default with --vocab) or classification (images in)")
    ms.add_argument("--measure-device", default="auto", help="auto (default: the GPU when there is one), cpu or cuda")


def _cost_args(p: argparse.ArgumentParser, *, prices_required: bool) -> None:
    m = p.add_argument_group("measured throughput (one of)")
    m.add_argument("--throughput", type=float, help="measured rate, in --unit per second, over --measured-gpus")
    m.add_argument("--bench", metavar="FILE", help="a rubin bench results file")
    m.add_argument("--summary", metavar="PATH", help="a run's summary.json (or its run directory)")
    m.add_argument("--bench-workload", help="which model benchmark in --bench to use")
    m.add_argument("--unit", default="samples", help="samples (default) or tokens")
    m.add_argument("--measured-gpu", help="GPU the throughput was measured on (a catalog key)")
    m.add_argument("--measured-gpus", type=int, default=1, help="GPUs the --throughput was measured on (default 1)")
    m.add_argument("--mfu", type=float, help="measured MFU (0-1), used to decide compute- vs memory-bound")
    m.add_argument("--tokens-per-sample", type=float, help="converts between samples and tokens")
    w = p.add_argument_group("work and prices")
    w.add_argument("--work", type=float, help="total work in --unit (e.g. 1e12 tokens)")
    w.add_argument("--epochs", type=float, help="epochs (with --dataset-size)")
    w.add_argument("--dataset-size", type=float, help="samples per epoch (with --epochs)")
    w.add_argument("--prices", metavar="YAML", required=prices_required, help="your price list (see examples/prices.example.yaml)")
    w.add_argument("--checkpoint-seconds", type=float, default=60.0, help="measured checkpoint save time (default 60)")
    w.add_argument("--emergency-checkpoint-seconds", type=float, help="save time on an eviction notice (default: --checkpoint-seconds)")
    w.add_argument("--job-gpus", type=int, help="GPUs the job uses on every option (default: one instance)")
    w.add_argument("--job-nodes", type=int, help="instances the job uses on every option (default 1)")
    w.add_argument("--scaling-efficiency", type=float, default=0.95, help="efficiency per doubling of GPUs (default 0.95)")
    w.add_argument("--scaling", action="append", metavar="GPUS=EFF", help="measured scaling efficiency, repeatable")
    w.add_argument("--rank-by", default="cost", help="cost (default), time, deadline")
    w.add_argument("--deadline-hours", type=float, help="deadline for --rank-by deadline (checked at P90 on spot)")
    w.add_argument("--delay-cost-per-hour", type=float, default=0.0, help="what an hour of waiting costs you (TCO)")
    w.add_argument("--dtype", default="bf16", help="dtype whose peak drives projections (default bf16)")
    w.add_argument("--mc-runs", type=int, default=4000, help="Monte Carlo runs for P90 (default 4000)")
    w.add_argument("--seed", type=int, default=0, help="Monte Carlo seed")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="plan_command", metavar="WHAT")
    p = sub.add_parser("memory", help="does it fit: memory per GPU per strategy, and the least-sharded that fits")
    _memory_args(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p = sub.add_parser("cost", help="time and cost per instance option, on demand and spot, ranked")
    _cost_args(p, prices_required=True)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p = sub.add_parser("project", help="project a measured throughput to an unmeasured GPU (a range)")
    m = p.add_argument_group("measured throughput (one of)")
    m.add_argument("--throughput", type=float)
    m.add_argument("--bench", metavar="FILE")
    m.add_argument("--summary", metavar="PATH")
    m.add_argument("--bench-workload")
    m.add_argument("--unit", default="samples")
    m.add_argument("--measured-gpu")
    m.add_argument("--measured-gpus", type=int, default=1)
    m.add_argument("--tokens-per-sample", type=float)
    p.add_argument("--to", dest="targets", action="append", required=True, metavar="GPU", help="target GPU (repeatable)")
    p.add_argument("--mfu", type=float, help="measured MFU (0-1)")
    p.add_argument("--arithmetic-intensity", type=float, help="FLOPs per byte of memory traffic of the step")
    p.add_argument("--bound-fraction", type=float, help="share of the step that scales with the bound resource")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--actual", type=float, help="measured per-GPU throughput on the target: report the projection error")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("advise", help="the four dimensions (scale, duration, communication, budget) and a pick")
    _memory_args(p)
    _cost_args(p, prices_required=False)
    p.add_argument("--busbw-gbs", type=float, help="measured all-reduce bus bandwidth in GB/s (nccl-tests busbw)")
    p.add_argument("--global-batch", type=int, help="samples per optimizer step (default: micro-batch x GPUs)")
    p.add_argument("--json", action="store_true")
    parser.set_defaults(_plan_parser=parser)


def _print_json(data: dict) -> None:
    from rubin.runs import _clean

    print(json.dumps(_clean(data), indent=2))


def run(args: argparse.Namespace) -> int:
    from rubin.plan import inputs, render

    what = getattr(args, "plan_command", None)
    if what is None:
        args._plan_parser.print_help()
        raise UsageError("plan needs a subcommand: memory, cost, project or advise; e.g. rubin plan memory --help")
    if getattr(args, "precision", None) is not None:  # one name per precision from here on (amp-bf16 is bf16)
        from rubin.plan.states import canonical_precision

        args.precision = canonical_precision(args.precision)
    if what == "memory":
        from rubin.plan.memory import plan

        result = plan(inputs.memory_request(args))
        _print_json(result) if args.json else render.memory(result)
    elif what == "cost":
        from rubin.plan.cost import plan

        result = plan(inputs.cost_request(args))
        _print_json(result) if args.json else render.cost(result)
    elif what == "project":
        result = inputs.projections(args)
        _print_json(result) if args.json else render.projections(result)
    else:
        from rubin.plan.advise import advise

        req = inputs.memory_request(args)
        cost_plan = None
        if args.prices:
            from rubin.plan.cost import plan

            cost_plan = plan(inputs.cost_request(args))
        busbw = args.busbw_gbs
        if busbw is None and args.bench:
            from rubin.plan.throughput import busbw_from_bench

            busbw = busbw_from_bench(args.bench)
        result = advise(req, cost_plan, busbw_gbs=busbw, global_batch=args.global_batch)
        _print_json(result) if args.json else render.advice(result)
    return 0
