"""The advisor: the four dimensions of the platform choice (model scale, job duration,
communication need, budget and elasticity), each answered with a number from the planners,
then one recommendation with its reasons.
"""

from __future__ import annotations

from dataclasses import replace

from rubin.plan import GIB
from rubin.plan import memory as mem
from rubin.plan.states import bytes_per_param

SCHEMA_VERSION = 1


def comm_time_per_step(params: float, gpus: int, strategy: str, busbw_gbs: float, grad_bytes: float = 2.0) -> float:
    """Seconds of collective traffic per optimizer step, without overlap.

    nccl-tests' bus bandwidth already folds in the algorithm factor: an all-reduce of S bytes over n
    ranks takes S * 2(n-1)/n / busbw; all-gather and reduce-scatter take S * (n-1)/n / busbw each.
    DDP and ZeRO-1/2 reduce the gradients once (an all-reduce, or reduce-scatter + all-gather);
    FSDP gathers the weights for forward and backward and reduce-scatters the gradients: 1.5x.
    """
    if gpus <= 1:
        return 0.0
    size = params * grad_bytes
    factor = 3.0 if strategy.startswith(("fsdp", "hybrid")) else 2.0
    return size * factor * (gpus - 1) / gpus / (busbw_gbs * 1e9)


def _scale(memory_plan: dict) -> dict:
    rec = memory_plan.get("recommended")
    row = next((r for r in memory_plan["strategies"] if r["strategy"] == rec), None)
    if rec is None:
        text = memory_plan["verdict"]
        level = "too large for this GPU count"
    elif rec == "ddp":
        level, text = "small", f"fits with plain DDP ({row['total_bytes'] / GIB:.1f} GiB per GPU): any GPU with this memory will do"
    elif rec in ("zero1", "zero2", "hybrid", "fsdp"):
        level, text = "large", f"needs sharding: {row['label']} ({row['total_bytes'] / GIB:.1f} GiB per GPU)"
    else:
        level, text = "very large", f"needs {row['label']} ({row['total_bytes'] / GIB:.1f} GiB per GPU): more memory per GPU pays"
    return {"level": level, "recommended_strategy": rec,
            "max_micro_batch": memory_plan.get("recommended_max_micro_batch"), "text": text}


def _duration(hours: float | None) -> dict:
    if hours is None:
        return {"level": "unknown", "hours": None, "text": "no throughput and price list: duration not estimated"}
    if hours < 24:
        level, text = "short", "under a day: reliability matters little, checkpoints are cheap insurance"
    elif hours < 24 * 14:
        level, text = "days", "days: checkpoint on a schedule, expect node failures and evictions"
    else:
        level, text = "weeks", "two weeks or more: reliability and restart time dominate; a faster platform shortens the exposure"
    return {"level": level, "hours": hours, "text": f"{hours:.1f} h ({hours / 24:.1f} days): {text}"}


def _communication(params: float, gpus: int, strategy: str | None, busbw_gbs: float | None,
                   step_s: float | None, grad_bytes: float) -> dict:
    grad = params * grad_bytes
    out = {"gradient_bytes_per_step": grad, "busbw_gbs": busbw_gbs, "comm_s_per_step": None,
           "step_s": step_s, "comm_fraction": None}
    if gpus <= 1:
        return {**out, "level": "none", "text": "one GPU: no gradient traffic"}
    if busbw_gbs is None:
        return {**out, "level": "unknown",
                "text": f"{grad / 1e9:.2f} GB of gradients per step; pass --busbw-gbs or a bench file with all-reduce results to size it"}
    t = comm_time_per_step(params, gpus, strategy or "ddp", busbw_gbs, grad_bytes)
    out["comm_s_per_step"] = t
    if step_s is None:
        return {**out, "level": "unknown", "text": f"{t * 1e3:.0f} ms of collectives per step at {busbw_gbs:g} GB/s; step time unknown"}
    frac = t / step_s
    out["comm_fraction"] = frac
    if frac < 0.15:
        level, hint = "low", "interconnect is not the bottleneck: do not pay for NVLink-domain scale"
    elif frac < 0.5:
        level, hint = "moderate", "overlap with backward and bucket sizes matter; NVLink/InfiniBand bandwidth shows in the step time"
    else:
        level, hint = "high", ("communication-bound: prefer a larger NVLink domain (GB300 / Vera Rubin NVL72), a bigger "
                               "batch per GPU, gradient accumulation or hybrid sharding")
    return {**out, "level": level,
            "text": f"{t * 1e3:.0f} ms of collectives per {step_s * 1e3:.0f} ms step ({frac:.0%}, no overlap): {hint}"}


def _budget(opt: dict | None, currency: str) -> dict:
    if opt is None:
        return {"level": "unknown", "text": "no price list: cost not estimated"}
    od = opt["on_demand_tco"]
    s = opt["spot"]
    if not s:
        return {"level": "on-demand only", "on_demand_cost": od,
                "text": f"{opt['name']}: {od:,.0f} {currency} on demand; no spot offer"}
    saving = 1 - s["expected_tco"] / od
    margin = s["break_even_hazard_per_hour"] / s["hazard_per_hour"] if s["hazard_per_hour"] else float("inf")
    if saving > 0 and margin >= 2:
        level = "spot pays"
    elif saving > 0:
        level = "spot marginal"
    else:
        level = "on demand"
    ckpt = ("emergency checkpoint on the eviction notice" if s["emergency_checkpoint_fits"]
            else f"checkpoints every {s['checkpoint_interval_s'] / 60:.0f} min")
    text = (f"{opt['name']}: on demand {od:,.0f} {currency}; spot expected {s['expected_tco']:,.0f} "
            f"(P90 {s['p90_cost']:,.0f}, {s['expected_preemptions']:.1f} evictions, {ckpt}); spot stops paying at "
            f"{s['break_even_hazard_per_hour']:.3g} evictions per node-hour ({margin:.1f}x your rate)")
    return {"level": level, "on_demand_cost": od, "spot_expected_cost": s["expected_tco"], "saving": saving,
            "hazard_margin": margin, "text": text}


def advise(req: mem.MemoryRequest, cost_plan: dict | None = None, *, busbw_gbs: float | None = None,
           global_batch: int | None = None) -> dict:
    """Memory per option (on its GPU and node count), then the four dimensions and a pick."""
    from rubin.plan.target import gpu_memory

    per_option = []
    chosen, chosen_mem = None, None
    if cost_plan:
        for opt in sorted(cost_plan["options"], key=lambda o: o["rank"]):
            _, size, _ = gpu_memory(opt["gpu"], None)
            r = replace(req, gpu_name=opt["gpu"], gpu_memory_bytes=size, gpus_per_node=opt["gpus_per_node"],
                        nodes=opt["nodes"], notes=[])
            mp = mem.plan(r)
            # CPU offload "fits" almost anything but runs at PCIe speed: an option that needs it
            # counts as fitting only when no option fits on the GPUs alone
            rec = next((row for row in mp["strategies"] if row["strategy"] == mp["recommended"]), None)
            fits = rec is not None and rec["fits"] and not rec["slow"]
            per_option.append({"name": opt["name"], "rank": opt["rank"], "fits": fits, "strategy": mp["recommended"],
                               "needs_offload": bool(rec and rec["slow"]), "_plan": mp, "_opt": opt})
            if fits and chosen is None:
                chosen, chosen_mem = opt, mp
        if chosen_mem is None:  # fall back to offload, then to the cheapest with its shortfall
            slow = next((o for o in per_option if o["needs_offload"]), None)
            if slow:
                chosen, chosen_mem = slow["_opt"], slow["_plan"]
        for o in per_option:
            o.pop("_plan"), o.pop("_opt")
        if chosen_mem is None:
            chosen = min(cost_plan["options"], key=lambda o: o["rank"])
            _, size, _ = gpu_memory(chosen["gpu"], None)
            chosen_mem = mem.plan(replace(req, gpu_name=chosen["gpu"], gpu_memory_bytes=size,
                                          gpus_per_node=chosen["gpus_per_node"], nodes=chosen["nodes"], notes=[]))
    else:
        chosen_mem = mem.plan(req)
    scale = _scale(chosen_mem)
    hours = None if chosen is None else (chosen["spot"]["expected_hours"] if chosen["best"] == "spot" else chosen["hours"])
    gpus = chosen["gpus"] if chosen else req.gpus
    step_s = None
    if chosen:
        batch = global_batch or (req.micro_batch * gpus)
        per_sample = chosen["throughput"] / (req.model.seq_len or 1) if chosen["unit"] == "tokens" else chosen["throughput"]
        step_s = batch / per_sample
    grad_bytes = bytes_per_param(req.precision, req.optimizer).grads
    comm = _communication(req.model.params, gpus, scale["recommended_strategy"], busbw_gbs, step_s, grad_bytes)
    budget = _budget(chosen, cost_plan["currency"] if cost_plan else "")
    reasons = [f"model scale: {scale['text']}", f"job duration: {_duration(hours)['text']}",
               f"communication: {comm['text']}", f"budget: {budget['text']}"]
    if chosen:
        mode = "spot" if chosen["best"] == "spot" else "on demand"
        from rubin.plan.states import STRATEGY_LABELS

        strategy = STRATEGY_LABELS.get(scale["recommended_strategy"], "tensor/pipeline parallelism")
        text = f"{chosen['name']} x{chosen['nodes']} ({chosen['gpus']} {chosen['gpu']}), {mode}, {strategy}"
        if chosen["best"] == "spot" and chosen["spot"]["checkpoint_interval_s"]:
            text += f", checkpoint every {chosen['spot']['checkpoint_interval_s'] / 60:.0f} min"
        skipped = [o["name"] for o in per_option if not o["fits"] and o["rank"] < chosen["rank"]]
        if skipped:
            reasons.append(f"cheaper options skipped because the model does not fit: {', '.join(skipped)}")
    else:
        from rubin.plan.states import STRATEGY_LABELS

        strategy = STRATEGY_LABELS.get(scale["recommended_strategy"], "tensor/pipeline parallelism")
        text = f"{strategy} on {req.gpu_name or 'the given GPU'}"
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "rubin.plan.advise",
        "recommendation": text,
        "reasons": reasons,
        "dimensions": {"model_scale": scale, "job_duration": _duration(hours), "communication": comm, "budget": budget},
        "options": per_option,
        "memory": chosen_mem,
        "cost": cost_plan,
    }
