import pytest
import yaml

from rubin.errors import UsageError
from rubin.train.config import changed_keys, describe_fields, load_config


def test_demo_defaults_resolve_and_run_dir():
    cfg = load_config(None)
    assert cfg.model.name == "vit" and cfg.data.name == "digits"
    assert str(cfg.run_dir) == "runs/demo"


def test_yaml_plus_repeated_overrides(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump({"run": {"max_steps": 5, "dir": str(tmp_path / "r")}, "optim": {"lr": 0.1}}))
    cfg = load_config(f, ["optim.lr=0.5", "model.args.dim=32", "telemetry.sinks=[jsonl, tensorboard]", "precision=bf16"])
    assert cfg.optim.lr == 0.5
    assert cfg.model.args == {"dim": 32}
    assert cfg.telemetry.sinks == ["jsonl", "tensorboard"]
    assert cfg.precision == "bf16"
    assert cfg.run.max_steps == 5


def test_unknown_key_suggests_the_close_one():
    with pytest.raises(UsageError, match=r"unknown key 'optim.weight_decy' \(did you mean 'weight_decay'\?\)"):
        load_config(None, ["optim.weight_decy=0.1"])


def test_unknown_section_lists_sections():
    with pytest.raises(UsageError, match=r"unknown key 'optimizer' \(did you mean 'optim'\?\)"):
        load_config(None, ["optimizer.lr=0.1"])


def test_wrong_type_names_field_and_value():
    with pytest.raises(UsageError, match=r"run.max_steps='ten' is not valid"):
        load_config(None, ["run.max_steps=ten"])


def test_negative_lr_rejected():
    with pytest.raises(UsageError, match=r"optim.lr=-0.1 is not valid: input should be greater than 0"):
        load_config(None, ["optim.lr=-0.1"])


def test_length_required():
    with pytest.raises(UsageError, match="run.max_steps and run.epochs are both missing"):
        load_config(None, base={"run": {"name": "x"}})


def test_import_alias_round_trips_through_yaml(tmp_path):
    cfg = load_config(None, ["model.import=pkg.mod:build"])
    assert cfg.model.import_ == "pkg.mod:build"
    again = load_config(None, base=yaml.safe_load(cfg.to_yaml()))
    assert again.model.import_ == "pkg.mod:build"
    assert again.hash() == cfg.hash()


def test_missing_config_file_is_one_line(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_resumable_changes_are_not_a_different_config():
    a = load_config(None).model_dump(mode="json", by_alias=True)
    b = load_config(None, ["run.max_steps=999", "checkpoint.every_steps=5", "data.num_workers=2"]).model_dump(mode="json", by_alias=True)
    c = load_config(None, ["optim.lr=0.1", "model.args.dim=8"]).model_dump(mode="json", by_alias=True)
    assert changed_keys(a, b) == []
    assert changed_keys(a, c) == ["model.args", "optim.lr"]


def test_field_descriptions_are_the_help():
    text = describe_fields()
    assert "data.batch_size = 64" in text
    assert "GLOBAL batch per optimizer step" in text
    assert "checkpoint.async = False" in text


def test_picking_another_model_on_the_demo_drops_the_demo_vit_arguments():
    assert load_config(None, ["model.name=mlp"]).model.args == {}
    assert load_config(None, ["model.import=pkg.mod:build"]).model.args == {}
    assert load_config(None, ["model.name=mlp", "model.args.hidden=64"]).model.args == {"hidden": 64}
    demo = load_config(None, []).model.args
    assert demo["patch_size"] == 4
    assert load_config(None, ["model.name=vit"]).model.args == demo  # the same model keeps its shape
    assert load_config(None, ["model.args.dim=32"]).model.args == {**demo, "dim": 32}


def test_a_config_file_keeps_its_model_arguments(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("run: {max_steps: 2}\nmodel: {name: vit, args: {patch_size: 2}}\n")
    assert load_config(f, ["model.name=mlp"]).model.args == {"patch_size": 2}  # the file says so: its error to fix
