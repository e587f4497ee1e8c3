"""--from-deepspeed: a ds_config.json mapped onto rubin's config; every key mapped, refused or its difference stated."""

import json

import pytest
import yaml
from utils import invoke

from rubin.errors import UsageError
from rubin.train.deepspeed import translate

ZERO3 = {
    "train_batch_size": 64, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": "auto",
    "gradient_clipping": 0.5, "bf16": {"enabled": True},
    "zero_optimization": {"stage": 3, "overlap_comm": True, "stage3_prefetch_bucket_size": 5e7,
                          "offload_optimizer": {"device": "none"}},
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 100, "warmup_max_lr": 6e-4,
                                                      "total_num_steps": 1000, "warmup_type": "linear"}},
    "steps_per_print": 10, "wall_clock_breakdown": False,
}


def test_a_zero3_config_maps_onto_fsdp_and_every_dropped_key_is_stated():
    out, notes = translate(ZERO3, world_size=2)
    assert out == {
        "distributed.strategy": "fsdp", "precision": "bf16", "data.batch_size": 64, "data.micro_batch_size": 8,
        "optim.grad_clip": 0.5, "optim.name": "adamw", "optim.betas": [0.9, 0.95], "optim.lr": 6e-4,
        "optim.weight_decay": 0.1, "optim.warmup_steps": 100, "run.max_steps": 1000, "run.epochs": None,
        "optim.schedule": "linear", "optim.min_lr_ratio": 0.0, "telemetry.log_every_steps": 10,
    }
    text = "; ".join(notes)
    assert "overlap_comm, stage3_prefetch_bucket_size: dropped" in text and "wall_clock_breakdown: dropped" in text


@pytest.mark.parametrize("stage,strategy,note", [
    (0, "auto", "DDP on 2 or more processes"),
    (1, "fsdp", "nearest rubin equivalent"),
    (2, "fsdp", "nearest rubin equivalent"),
])
def test_zero_stages_map_to_the_nearest_strategy_and_say_so(stage, strategy, note):
    out, notes = translate({"zero_optimization": {"stage": stage}}, world_size=1)
    assert out["distributed.strategy"] == strategy and any(note in n for n in notes)


@pytest.mark.parametrize("batch,micro,accum,world,expected", [
    (32, 4, None, 2, (32, 4)),     # accumulation derived: 4
    (32, None, 2, 2, (32, 8)),     # micro derived
    (None, 4, 2, 2, (16, 4)),      # global derived
    (32, None, None, 4, (32, 8)),  # micro = batch / world
])
def test_batch_sizes_follow_deepspeeds_rule(batch, micro, accum, world, expected):
    ds = {k: v for k, v in (("train_batch_size", batch), ("train_micro_batch_size_per_gpu", micro),
                            ("gradient_accumulation_steps", accum)) if v is not None}
    out, _ = translate(ds, world_size=world)
    assert (out["data.batch_size"], out["data.micro_batch_size"]) == expected


def test_inconsistent_batch_sizes_are_refused_as_deepspeed_would():
    with pytest.raises(UsageError, match=r"train_batch_size = micro x accumulation x world size = 32; fix one of them"):
        translate({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2}, world_size=2)


def test_keys_without_an_equivalent_are_refused_together_on_one_line():
    ds = {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}, "optimizer": {"type": "Lamb", "params": {}},
          "scheduler": {"type": "OneCycle"}, "fp16": {"enabled": True, "loss_scale": 128}, "train_batchsize": 8}
    with pytest.raises(UsageError) as err:
        translate(ds, world_size=1, where="ds.json")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("ds.json: no rubin equivalent for ")
    for part in ("zero_optimization.offload_param (CPU/NVMe offload", "optimizer.type='Lamb'", "scheduler.type='OneCycle'",
                 "fp16.loss_scale=128 (a static loss scale", "train_batchsize (not a DeepSpeed key rubin knows (did you mean "
                 "'train_batch_size'?))"):
        assert part in msg


def test_fp16_dynamic_scaling_maps_with_a_stated_difference():
    out, notes = translate({"fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}}, world_size=1)
    assert out["precision"] == "fp16" and any("GradScaler" in n for n in notes)


def test_print_config_shows_the_result_and_set_still_wins(tmp_path):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(ZERO3))
    r = invoke(["train", "--from-deepspeed", path, "--set", "optim.lr=1e-4", "--print-config"])
    assert r.exit_code == 0, r.stderr
    cfg = yaml.safe_load(r.stdout)
    assert cfg["distributed"]["strategy"] == "fsdp" and cfg["precision"] == "bf16" and cfg["optim"]["grad_clip"] == 0.5
    assert cfg["data"]["batch_size"] == 64 and cfg["data"]["micro_batch_size"] == 8  # one process: 8 accumulation steps
    assert cfg["optim"]["lr"] == 1e-4  # --set is applied after the DeepSpeed mapping
    assert r.stderr.startswith("from-deepspeed: ") and r.stderr.count("\n") == 1


def test_a_broken_ds_config_file_is_one_line(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text("{not json")
    r = invoke(["train", "--from-deepspeed", path, "--print-config"])
    assert r.exit_code == 2 and "ds.json" in r.stderr and r.stderr.count("\n") == 1
