"""Config as code: typed, strict pydantic models. Field descriptions are the help text.

A config is a YAML file plus repeated ``--set section.key=value`` overrides. Unknown keys are
rejected with a did-you-mean; every error is one line naming the field, the value, what is
allowed and the fix.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rubin.errors import UsageError, load_mapping, safe_yaml, validation_error


class _Section(BaseModel):
    # allow_inf_nan=False: `optim.lr=inf` or `run.epochs=.inf` is a typo that would train NaNs or forever
    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_assignment=True, allow_inf_nan=False)


class RunConfig(_Section):
    name: str = Field("demo", min_length=1, description="run name; the default run dir is runs/<name>")
    dir: Optional[str] = Field(None, description="run directory (default: runs/<name>)")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seed for python, numpy, torch and the data order")
    deterministic: bool = Field(False, description="pin threads and kernels, warm oneMKL's vector math: bit-identical "
                                "reruns and resumes at the same world size and thread count (docs/train.md)")
    max_steps: Optional[int] = Field(None, gt=0, le=10**12, description="optimizer steps to train (or use epochs)")
    epochs: Optional[float] = Field(None, gt=0, le=1e6, description="epochs to train, converted to steps (or use max_steps)")
    eval_every_steps: int = Field(0, ge=0, description="evaluate every N steps (0: only at the end)")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda when available, else cpu")
    allow_tf32: bool = Field(True, description="let fp32 matmuls use TF32 tensor cores on GPUs that have them")
    gc_every_steps: Optional[int] = Field(50, gt=0, description="run Python's garbage collector every N steps, on every rank "
                                          "at once, instead of mid-step (null: Python's own schedule)")


    @field_validator("name")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        # the name becomes a folder under runs/: '../x' or 'a/b' would write outside it
        if v in (".", "..") or any(c in v for c in "/\\\0") or v.strip() != v:
            raise ValueError(f"run.name={v!r} is not valid: a run name is one folder name, without '/', '\\', "
                             "'..' or surrounding spaces; use e.g. run.name=my-run, or set run.dir to choose the folder")
        return v


class ModelConfig(_Section):
    name: str = Field("vit", description="reference model: vit, resnet, gpt, llama, mlp (ignored when import is set)")
    import_: Optional[str] = Field(None, alias="import", description="'pkg.module:function' returning an nn.Module")
    args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for the model builder")
    fused_loss: Union[bool, Literal["auto", "liger"]] = Field(
        "auto", description="head + cross-entropy in chunks, without the full logits: true = rubin's, liger = Liger-Kernel's "
        "(CUDA, rubin[liger]); auto = on CUDA for a known lm_head (rubin's LMs, HF causal LMs), Liger's when it imports")


class DataConfig(_Section):
    name: str = Field("digits", description="dataset: digits, synthetic_images, synthetic_tokens, synthetic, image_folder, cifar10, tokens")
    import_: Optional[str] = Field(None, alias="import",
        description="'pkg.module:function' returning (train_dataset, eval_dataset_or_None)")
    path: Optional[str] = Field(None, description="data location for folder, cifar10 and token datasets")
    args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for the dataset builder")
    batch_size: int = Field(64, gt=0, description="GLOBAL batch per optimizer step, over all ranks and accumulation")
    micro_batch_size: Optional[int] = Field(None, gt=0, description="per-rank batch per forward (default: batch_size / world size)")
    eval_batch_size: Optional[int] = Field(None, gt=0, description="per-rank eval batch (default: micro batch)")
    num_workers: int = Field(0, ge=0, description="DataLoader worker processes per rank")
    pin_memory: Optional[bool] = Field(None, description="pinned host memory (default: on with CUDA)")
    persistent_workers: bool = Field(True, description="keep workers alive across epochs")
    prefetch_factor: Optional[int] = Field(None, gt=0, description="batches each worker loads ahead")
    task: Optional[Literal["classification", "lm"]] = Field(None,
        description="loss: cross-entropy on (x, y), or next-token for lm (default: from the data)")
    num_classes: Optional[int] = Field(None, ge=2, description="classes of an imported classification dataset (default: inferred)")


class OptimConfig(_Section):
    name: Literal["adamw", "sgd"] = Field("adamw", description="optimizer")
    lr: float = Field(3e-3, gt=0, le=10, description="peak learning rate")
    weight_decay: float = Field(0.05, ge=0, le=10, description="decoupled weight decay; never applied to norms or biases")
    betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] = Field(
        (0.9, 0.95), description="AdamW betas, each in [0, 1)")
    momentum: float = Field(0.9, ge=0, description="SGD momentum")
    warmup_steps: int = Field(0, ge=0, description="linear warmup steps")
    schedule: Literal["cosine", "linear", "constant"] = Field("cosine", description="decay after warmup")
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="final lr as a fraction of the peak")
    impl: Literal["auto", "fused", "foreach", "for-loop"] = Field("auto",
        description="optimizer kernels: auto = fused on CUDA, foreach elsewhere")
    grad_clip: Optional[float] = Field(1.0, gt=0, description="clip the global grad norm (after unscaling under fp16); null: off")


class DistributedConfig(_Section):
    strategy: Literal["auto", "single", "ddp", "fsdp"] = Field("auto",
        description="auto: single at world size 1, else ddp; fsdp: FSDP2 fully_shard per block")
    backend: Literal["auto", "nccl", "gloo"] = Field("auto", description="auto: nccl on CUDA, gloo on CPU")
    timeout_s: float = Field(600, gt=0, description="process-group timeout, so a hang never waits for NCCL's default")
    activation_checkpointing: bool = Field(False, description="recompute each block's activations in backward")
    blocks: Optional[str] = Field(None, description="the units for FSDP and activation checkpointing: class names (GPT2Block) "
                                  "or module paths (transformer.h), comma-separated (default: found automatically, see docs/byom.md)")
    compile: Union[bool, Literal["auto"]] = Field("auto", description="torch.compile each block (regional): auto = on CUDA; "
                                                 "a model that fails to compile trains eagerly after one warning")


class CheckpointConfig(_Section):
    every_steps: Optional[int] = Field(None, gt=0, description="save every N steps")
    every_minutes: Optional[float] = Field(None, gt=0, description="save every N minutes of training")
    keep_last: int = Field(3, ge=1, description="committed checkpoints to keep")
    keep_every_steps: Optional[int] = Field(None, gt=0, description="also keep milestones at multiples of N steps")
    async_: bool = Field(False, alias="async", description="snapshot to CPU memory, write in the background")
    async_policy: Literal["wait", "skip"] = Field("wait",
        description="a save due while the previous one is still being written: wait for it, or skip this one (one rank only)")
    preemption_grace_s: float = Field(25.0, gt=0, description="time allowed for the emergency save after a signal")
    save_final: bool = Field(True, description="save a checkpoint at the end of training")


class TelemetryConfig(_Section):
    log_every_steps: int = Field(10, gt=0, description="log metrics every N steps")
    sinks: list[Literal["jsonl", "tensorboard", "mlflow", "wandb"]] = Field(default_factory=lambda: ["jsonl"],
        description="where metrics go; jsonl is always written")
    nvml: bool = Field(True, description="sample GPU util, memory, power, clocks and throttle reasons via NVML")


class FaultsConfig(_Section):
    nan_policy: Literal["halt", "skip", "rollback"] = Field("halt", description="on a non-finite loss or grad norm")
    max_rollbacks: int = Field(3, ge=0, description="rollbacks allowed before halting")
    spike_factor: Optional[float] = Field(None, gt=1, description="treat loss above k x its running median as a spike")
    spike_window: int = Field(50, gt=1, description="steps in the running median")
    hang_timeout_s: Optional[float] = Field(None, gt=0, description="a step slower than this is a hang: report stacks and exit")


class ProfileConfig(_Section):
    enabled: bool = Field(False, description="trace a window of steps on every rank with torch.profiler "
                          "(rubin train --profile)")
    skip: int = Field(3, ge=0, description="untraced steps after the window opens (after the first checkpoint and "
                      "compile); their time is the baseline the profiler's cost is stated against")
    warmup: int = Field(1, ge=0, description="steps the profiler runs but discards (its own start-up)")
    active: int = Field(5, ge=1, le=1000, description="steps traced")
    memory_snapshot: bool = Field(False, description="on a GPU, also a CUDA memory snapshot "
                                  "(profile/memory-rank-N.pickle)")
    record_shapes: bool = Field(False, description="record operator input shapes (larger traces)")


class Config(_Section):
    run: RunConfig = Field(default_factory=RunConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    precision: Literal["fp32", "bf16", "fp16", "fp8"] = Field("fp32", description="fp32, bf16 autocast, fp16 autocast with "
                                                             "GradScaler, or fp8 (torchao float8 Linears + bf16; GPUs sm89+)")
    distributed: DistributedConfig = Field(default_factory=DistributedConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    faults: FaultsConfig = Field(default_factory=FaultsConfig)
    profile: ProfileConfig = Field(default_factory=ProfileConfig)
    # Opaque here: train/ does not know launch targets. rubin.launch.spec.launch_section validates it (rubin launch and rubin train).
    launch: Optional[dict[str, Any]] = Field(None, description="where and how `rubin launch` runs this config (see rubin launch --help)")

    @model_validator(mode="after")
    def _needs_length(self):
        if self.run.max_steps is None and self.run.epochs is None:
            raise ValueError("run.max_steps and run.epochs are both missing: set one, e.g. --set run.max_steps=1000")
        return self

    @property
    def run_dir(self) -> Path:
        return Path(self.run.dir) if self.run.dir else Path("runs") / self.run.name

    def to_yaml(self) -> str:
        """The resolved config as YAML, credentials in it redacted (it is saved in the run dir and compared on resume)."""
        from rubin.redact import redact_obj

        return yaml.safe_dump(redact_obj(self.model_dump(mode="json", by_alias=True)), sort_keys=False)

    def hash(self) -> str:
        return hashlib.sha256(self.to_yaml().encode()).hexdigest()[:16]


# Keys that may change between a run and its resume without changing what is trained.
RESUMABLE_CHANGES = {
    "run.max_steps", "run.epochs", "run.eval_every_steps", "run.dir", "run.device", "run.gc_every_steps",
    "data.num_workers", "data.pin_memory", "data.persistent_workers", "data.prefetch_factor",
    "data.eval_batch_size", "data.micro_batch_size", "distributed.strategy", "distributed.backend",
    "distributed.timeout_s", "distributed.compile", "optim.impl", "model.fused_loss",
    "checkpoint", "telemetry", "faults.hang_timeout_s", "launch",
}


def _flat(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and k not in ("args",):
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def changed_keys(old: dict, new: dict) -> list[str]:
    """Keys whose values differ between two resolved configs, ignoring resumable ones."""
    a, b = _flat(old), _flat(new)
    diff = [k for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]
    return [k for k in diff if k not in RESUMABLE_CHANGES and k.split(".")[0] not in RESUMABLE_CHANGES]


def _set_override(data: dict, item: str) -> None:
    if "=" not in item:
        raise UsageError(f"--set {item!r} is not valid: expected section.key=value, e.g. --set optim.lr=1e-3")
    key, raw = item.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise UsageError(f"--set {item!r} is not valid: expected section.key=value")
    try:
        value = safe_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    node = data
    for p in parts[:-1]:
        nxt = node.setdefault(p, {})
        if not isinstance(nxt, dict):
            raise UsageError(f"--set {item!r} is not valid: {p!r} is a value, not a section")
        node = nxt
    node[parts[-1]] = value


def load_config(path: str | Path | None, overrides: list[str] | None = None, *, base: dict | None = None) -> Config:
    """Resolve a config from a YAML file (or the demo defaults) plus --set overrides."""
    if path is None:
        data = dict(base if base is not None else demo_defaults())
        if base is None:
            data["model"] = _demo_model(data["model"], overrides or [])
    else:
        data = load_mapping(path, "config file", "pass a YAML file (see examples/) or no CONFIG for the demo")
    for item in overrides or []:
        _set_override(data, item)
    try:
        return Config.model_validate(data)
    except ValidationError as err:
        raise validation_error(err, Config, fix=f"fix it in the config or with --set {_loc(err)}=...") from None


def _loc(err: ValidationError) -> str:
    return ".".join(str(p) for p in err.errors()[0]["loc"] if not isinstance(p, int)) or "section.key"


def _demo_model(model: dict, overrides: list[str]) -> dict:
    """The demo's model section, without its ViT arguments when --set picks another model:
    ``--set model.name=mlp`` means the MLP's own defaults (plus any ``model.args`` given with it),
    not an MLP handed ``patch_size``."""
    keys = {item.split("=", 1)[0].strip(): item.split("=", 1)[1].strip() for item in overrides if "=" in item}
    if keys.get("model.name", model["name"]) != model["name"] or "model.import" in keys:
        return {k: v for k, v in model.items() if k != "args"}
    return model


def demo_defaults() -> dict:
    """`rubin train` with no config: a small ViT on scikit-learn's digits, with an eval split."""
    return {
        "run": {"name": "demo", "epochs": 60, "eval_every_steps": 0, "seed": 0},
        "model": {"name": "vit", "args": {"patch_size": 4, "dim": 64, "depth": 4, "heads": 4, "mlp_ratio": 2.0, "dropout": 0.1}},
        "data": {"name": "digits", "batch_size": 64},
        "optim": {"name": "adamw", "lr": 3e-3, "weight_decay": 0.05, "warmup_steps": 66, "schedule": "cosine"},
        "telemetry": {"log_every_steps": 20},
        "checkpoint": {"every_steps": 200},
    }


def describe_fields() -> str:
    """Every config key with its type, default and description: the help text."""
    lines = []
    for sec_name, sec_field in Config.model_fields.items():
        ann = sec_field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            lines.append(f"{sec_name}:")
            for name, f in ann.model_fields.items():
                key = f.alias or name
                default = f.get_default(call_default_factory=True)
                lines.append(f"  {sec_name}.{key} = {default!r}\n      {f.description}")
        else:
            lines.append(f"{sec_name} = {sec_field.default!r}\n    {sec_field.description}")
    return "\n".join(lines)
