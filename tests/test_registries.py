"""Each kind of pluggable thing is one module plus one line in its table: a dummy put into the table
shows up where users choose it, and taking the line out takes it away."""

from __future__ import annotations

import types

from utils import invoke


def _dummy_target() -> types.ModuleType:
    from rubin.launch.job import Launched

    mod = types.ModuleType("dummy_target")
    mod.NAME, mod.EXTENSION, mod.CONTAINER, mod.SECRETS_FROM_SHELL = "dummy", "txt", False, True
    mod.SUBMIT, mod.INSTALL = None, ""
    mod.check = lambda job, cfg, env: None
    mod.render = lambda job: f"dummy job {job.name} runs {' '.join(job.train_args())}\n"
    mod.submit = lambda job, text, out, env, say: Launched(job.target, text, out)
    return mod


def test_every_launch_target_meets_the_protocol():
    from rubin.launch import targets
    from rubin.launch.target import Target

    assert list(targets.TARGETS) == ["local", "slurm", "k8s", "azureml", "skypilot"]
    assert [name for name, mod in targets.TARGETS.items() if not isinstance(mod, Target) or mod.NAME != name] == []
    assert not isinstance(types.ModuleType("empty"), Target)  # the check reads the names, it is not always true


def test_a_launch_target_is_one_table_line(tmp_path, monkeypatch):
    from rubin.launch import targets

    cfg = tmp_path / "train.yaml"
    cfg.write_text("run: {name: reg, max_steps: 1}\n")
    with monkeypatch.context() as m:
        m.setitem(targets.TARGETS, "dummy", _dummy_target())
        assert "dummy" in invoke(["launch", "--help"]).stdout
        r = invoke(["launch", "dummy", cfg, "--dry-run"])
        assert r.exit_code == 0, r.stderr
        assert r.stdout.startswith("dummy job reg runs -m rubin train")
    assert "dummy" not in invoke(["launch", "--help"]).stdout
    r = invoke(["launch", "dummy", cfg, "--dry-run"])
    assert r.exit_code == 2 and "TARGET='dummy' is not valid" in r.stderr and "allowed are local, slurm" in r.stderr
