"""``rubin train --from-deepspeed ds_config.json``: a DeepSpeed config mapped onto rubin's.

``translate(ds, world_size)`` returns ``(overrides, notes)``: rubin config keys with their values
(applied after the YAML config and before ``--set``), and one note per DeepSpeed key that has no
exact equivalent, saying what rubin does instead. Keys that would change the training if
dropped (CPU/NVMe offload, optimizers and schedulers rubin lacks, ...) are refused, all of them
on one line; nothing is ignored silently. ``"auto"`` (Hugging Face Trainer configs) means unset.
"""

from __future__ import annotations

from rubin.errors import UsageError, did_you_mean, load_mapping

# Tuning knobs of DeepSpeed's own communication and memory management. FSDP2 manages these itself;
# dropping them changes speed and memory, never the numbers trained.
_TUNING = {
    "overlap_comm", "contiguous_gradients", "reduce_bucket_size", "allgather_bucket_size", "allgather_partitions",
    "reduce_scatter", "round_robin_gradients", "sub_group_size", "stage3_prefetch_bucket_size",
    "stage3_param_persistence_threshold", "stage3_max_live_parameters", "stage3_max_reuse_distance",
    "stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save", "elastic_checkpoint",
    "load_from_fp32_weights", "ignore_unused_parameters", "use_multi_rank_bucket_allreduce", "zero_hpz_partition_size",
    "zero_quantized_weights", "zero_quantized_gradients", "mics_shard_size",
}
_HARMLESS_TOP = {
    "wall_clock_breakdown": "rubin always splits step time into data, compute and checkpoint",
    "zero_allow_untested_optimizer": "rubin's optimizers work with every strategy",
    "zero_force_ds_cpu_optimizer": "no CPU optimizer in rubin",
    "communication_data_type": "gradients are reduced in the parameter dtype",
    "prescale_gradients": "gradients are averaged after the all-reduce",
    "gradient_predivide_factor": "gradients are averaged after the all-reduce",
    "flops_profiler": "rubin counts FLOPs itself and reports MFU",
    "dump_state": "not needed",
    "memory_breakdown": "rubin logs peak memory every log step",
    "csv_monitor": "rubin writes metrics.jsonl",
    "comms_logger": "not available",
}
_KNOWN_TOP = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
              "zero_optimization", "bf16", "fp16", "optimizer", "scheduler", "steps_per_print", "tensorboard", "wandb",
              "activation_checkpointing", "amp", "seed"} | set(_HARMLESS_TOP)


def _set(value):
    return None if value == "auto" else value


def load(path: str, world_size: int) -> tuple[dict, list[str]]:
    ds = load_mapping(path, "DeepSpeed config", "pass the ds_config.json your DeepSpeed job used")
    return translate(ds, world_size, where=path)


def translate(ds: dict, world_size: int, where: str = "ds_config") -> tuple[dict, list[str]]:
    out: dict = {}
    notes: list[str] = []
    refused: list[str] = []
    for key in ds:
        if key not in _KNOWN_TOP:
            refused.append(f"{key} (not a DeepSpeed key rubin knows{did_you_mean(key, sorted(_KNOWN_TOP))})")
        elif key in _HARMLESS_TOP:
            notes.append(f"{key}: dropped ({_HARMLESS_TOP[key]})")
    _zero(ds.get("zero_optimization") or {}, out, notes, refused)
    _precision(ds, out, notes, refused)
    _batch(ds, world_size, out, notes)
    clip = _set(ds.get("gradient_clipping"))
    if clip is not None:
        out["optim.grad_clip"] = float(clip) if clip else None
    _optimizer(_set(ds.get("optimizer")), out, notes, refused)
    _scheduler(_set(ds.get("scheduler")), out, notes, refused)
    if _set(ds.get("steps_per_print")):
        out["telemetry.log_every_steps"] = int(ds["steps_per_print"])
    if _set(ds.get("seed")) is not None:
        out["run.seed"] = int(ds["seed"])
    sinks = [s for s in ("tensorboard", "wandb") if (ds.get(s) or {}).get("enabled")]
    if sinks:
        out["telemetry.sinks"] = ["jsonl", *sinks]
    if "activation_checkpointing" in ds:
        notes.append("activation_checkpointing: configures DeepSpeed's checkpointing API, which rubin does not use; "
                     "set distributed.activation_checkpointing=true to recompute each block")
    if (ds.get("amp") or {}).get("enabled"):
        refused.append("amp.enabled (NVIDIA apex AMP; use bf16 or fp16)")
    if refused:
        raise UsageError(f"{where}: no rubin equivalent for {'; '.join(refused)}; remove these keys from the DeepSpeed "
                         "config (or set them in rubin's config) and rerun")
    return out, notes


def _zero(z: dict, out: dict, notes: list, refused: list) -> None:
    stage = _set(z.get("stage", 0))
    if stage in (None, 0):
        out["distributed.strategy"] = "auto"
        notes.append("zero_optimization.stage=0 -> distributed.strategy=auto (DDP on 2 or more processes, single on one)")
    elif stage in (1, 2):
        out["distributed.strategy"] = "fsdp"
        notes.append(f"zero_optimization.stage={stage} -> fsdp, the nearest rubin equivalent: it also shards the "
                     "parameters (like ZeRO-3), so less memory per GPU and one more all-gather per step")
    elif stage == 3:
        out["distributed.strategy"] = "fsdp"
    else:
        refused.append(f"zero_optimization.stage={stage!r} (0, 1, 2 or 3)")
    tuning = sorted(k for k in z if k in _TUNING)
    if tuning:
        notes.append(f"zero_optimization.{', '.join(tuning)}: dropped (FSDP2 sizes its own buckets and prefetch; "
                     "speed and memory may differ, results do not)")
    for key, value in z.items():
        if key == "stage" or key in _TUNING:
            continue
        if key in ("offload_optimizer", "offload_param", "cpu_offload", "cpu_offload_params", "cpu_offload_use_pin_memory"):
            device = value.get("device", "none") if isinstance(value, dict) else value
            if device not in ("none", None, False):
                refused.append(f"zero_optimization.{key} (CPU/NVMe offload: rubin keeps parameters and optimizer on the GPU)")
        else:
            refused.append(f"zero_optimization.{key}")


def _precision(ds: dict, out: dict, notes: list, refused: list) -> None:
    bf16 = bool(_set((ds.get("bf16") or {}).get("enabled")))
    fp16 = ds.get("fp16") or {}
    if bf16 and _set(fp16.get("enabled")):
        refused.append("bf16.enabled and fp16.enabled both true (choose one)")
        return
    if bf16:
        out["precision"] = "bf16"
    elif _set(fp16.get("enabled")):
        out["precision"] = "fp16"
        scale_keys = sorted(k for k in fp16 if k not in ("enabled", "auto_cast"))
        if fp16.get("loss_scale", 0) not in (0, "auto"):
            refused.append(f"fp16.loss_scale={fp16['loss_scale']} (a static loss scale; rubin scales dynamically: set it to 0)")
        elif scale_keys:
            notes.append(f"fp16.{', fp16.'.join(scale_keys)}: rubin's dynamic loss scaling uses GradScaler's defaults "
                         "(initial 2^16, growth every 2000 steps)")
    elif "bf16" in ds or "fp16" in ds:
        out["precision"] = "fp32"


def _batch(ds: dict, world: int, out: dict, notes: list) -> None:
    """DeepSpeed's rule: train_batch_size = micro x accumulation x world size; two of the three fix the third."""
    batch, micro, accum = (_set(ds.get(k)) for k in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                                     "gradient_accumulation_steps"))
    for name, value in (("train_batch_size", batch), ("train_micro_batch_size_per_gpu", micro), ("gradient_accumulation_steps", accum)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UsageError(f"{name}={value!r} is not valid: a positive integer; fix it in the DeepSpeed config")
    shown = f"train_batch_size={batch}, train_micro_batch_size_per_gpu={micro}, gradient_accumulation_steps={accum}"
    if batch is not None and micro is not None and accum is not None:
        if batch != micro * accum * world:
            raise UsageError(f"{shown} do not fit world size {world}: DeepSpeed requires train_batch_size = micro x "
                             f"accumulation x world size = {micro * accum * world}; fix one of them")
    elif batch is not None and micro is not None:
        if batch % (micro * world):
            raise UsageError(f"{shown}: train_batch_size must be a multiple of micro x world size = {micro * world}")
    elif batch is not None and accum is not None:
        if batch % (accum * world):
            raise UsageError(f"{shown}: train_batch_size must be a multiple of accumulation x world size = {accum * world}")
        micro = batch // (accum * world)
    elif micro is not None:
        batch = micro * (accum or 1) * world
    elif batch is not None:
        if batch % world:
            raise UsageError(f"{shown}: train_batch_size must be a multiple of the world size {world}")
        micro = batch // world
    else:
        return
    out["data.batch_size"], out["data.micro_batch_size"] = batch, micro


def _optimizer(opt, out: dict, notes: list, refused: list) -> None:
    if not opt:
        return
    kind = str(opt.get("type", "")).lower()
    params = {k: _set(v) for k, v in (opt.get("params") or {}).items() if _set(v) is not None}
    if kind in ("adam", "adamw", "fusedadam"):
        if kind == "adam" and params.pop("adam_w_mode", True) is False:
            refused.append("optimizer Adam with adam_w_mode=false (L2-regularized Adam; rubin uses decoupled AdamW)")
            return
        out["optim.name"] = "adamw"
        if "betas" in params:
            out["optim.betas"] = list(params.pop("betas"))
    elif kind == "sgd":
        out["optim.name"] = "sgd"
        if "momentum" in params:
            out["optim.momentum"] = params.pop("momentum")
    else:
        refused.append(f"optimizer.type={opt.get('type')!r} (rubin has AdamW, Adam in AdamW mode, and SGD)")
        return
    if "lr" in params:
        out["optim.lr"] = params.pop("lr")
    if "weight_decay" in params:
        out["optim.weight_decay"] = params.pop("weight_decay")
    eps = params.pop("eps", 1e-8)
    if eps != 1e-8:
        notes.append(f"optimizer.params.eps={eps}: rubin uses torch's default 1e-8")
    for key in ("torch_adam", "adam_w_mode", "bias_correction"):
        params.pop(key, None)
    if params:
        refused.append(f"optimizer.params {', '.join(sorted(params))}")


def _scheduler(sched, out: dict, notes: list, refused: list) -> None:
    if not sched:
        return
    kind = sched.get("type")
    p = {k: _set(v) for k, v in (sched.get("params") or {}).items() if _set(v) is not None}
    if kind not in ("WarmupLR", "WarmupDecayLR", "WarmupCosineLR"):
        refused.append(f"scheduler.type={kind!r} (rubin maps WarmupLR, WarmupDecayLR and WarmupCosineLR)")
        return
    if "warmup_num_steps" in p:
        out["optim.warmup_steps"] = int(p["warmup_num_steps"])
    if "warmup_max_lr" in p:
        out["optim.lr"] = p["warmup_max_lr"]
    if p.get("warmup_min_lr", 0) or p.get("warmup_min_ratio", 0):
        notes.append("scheduler warmup_min_lr: rubin warms up from 0")
    if p.get("warmup_type", "log") == "log" and kind != "WarmupCosineLR":
        notes.append(f"scheduler {kind} warmup_type=log: rubin warms up linearly")
    if kind == "WarmupLR":
        out["optim.schedule"] = "constant"
        return
    if "total_num_steps" in p:
        out["run.max_steps"], out["run.epochs"] = int(p["total_num_steps"]), None
    if kind == "WarmupDecayLR":
        out["optim.schedule"], out["optim.min_lr_ratio"] = "linear", 0.0
    else:
        out["optim.schedule"] = "cosine"
        out["optim.min_lr_ratio"] = float(p.get("cos_min_ratio", 0.0))


def as_overrides(mapping: dict) -> list[str]:
    """``--set`` strings for the mapped keys (JSON values are valid YAML)."""
    import json

    return [f"{key}={json.dumps(value)}" for key, value in mapping.items()]
