"""The user's code gets the blame for its own errors: exit 2, one line with file:line; the run says it failed."""

import json
import sys
import textwrap

import pytest
from train.trainhelp import events, summary
from utils import invoke

USER = textwrap.dedent('''
    import torch
    from torch import nn


    def build(width=16, classes=4):
        return nn.Sequential(nn.Linear(16, width), nn.ReLU(), nn.Linear(width, classes))


    def exploding(width=16):
        raise ValueError(f"width {width} is not supported")


    def text_model():
        class Speaks(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(16, 4)

            def forward(self, x):
                return "not logits"
        return Speaks()


    def last_only(vocab=32):
        class Last(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb, self.head = nn.Embedding(vocab, 8), nn.Linear(8, vocab)

            def forward(self, idx):
                return self.head(self.emb(idx)[:, [-1], :])
        return Last()


    class Broken(torch.utils.data.Dataset):
        num_classes = 4

        def __len__(self):
            return 64

        calls = 0

        def __getitem__(self, i):
            Broken.calls += 1
            if Broken.calls > 40:  # a few steps in: a mid-run failure
                raise KeyError(f"sample {i} is missing")
            return torch.randn(16), i % 4


    def broken_data():
        return Broken(), None


    def frozen():
        m = build()
        for p in m.parameters():
            p.requires_grad_(False)
        return m


    class Labels(torch.utils.data.Dataset):
        num_classes = 4

        def __init__(self, label):
            self.label = label

        def __len__(self):
            return 64

        def __getitem__(self, i):
            return torch.randn(16), self.label


    def minus_one():
        return Labels(-1), None


    def with_path(path=None):
        if path != "the-data":
            raise ValueError(f"expected path='the-data', got {path!r}")
        return Labels(1), None


    def no_path():
        return Labels(1), None
''')


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(USER.splitlines(), 1) if marker in text)


@pytest.fixture
def user(tmp_path, monkeypatch):
    (tmp_path / "usermodels.py").write_text(USER)
    (tmp_path / "badsyntax.py").write_text("def build(:\n    pass\n")
    (tmp_path / "reraises.py").write_text("raise ModuleNotFoundError(\"No module named 'reraises'\", name='reraises')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield tmp_path
    for name in ("usermodels", "badsyntax", "reraises"):
        sys.modules.pop(name, None)


def _args(run_dir, *sets):
    base = [f"run.dir={run_dir}", "run.max_steps=6", "run.epochs=null", "model.import=usermodels:build", "model.args={}",
            "data.name=synthetic", "data.args={num_samples: 128, features: 16, num_classes: 4}", "data.batch_size=8",
            "telemetry.log_every_steps=1", "checkpoint.save_final=false"]
    return ["train", "--quiet", *[a for s in (*base, *sets) for a in ("--set", s)]]


def test_a_factory_argument_typo_is_a_usage_error_with_did_you_mean(user):
    r = invoke(_args(user / "run", "model.args={widht: 8}"))
    assert r.exit_code == 2
    assert "model.args.widht is not an argument of build (did you mean 'width'?); allowed: width, classes" in r.stderr
    assert not (user / "run").exists()  # a failed start leaves no run dir


def test_an_exception_inside_the_factory_shows_the_users_frame(user):
    r = invoke(_args(user / "run", "model.import=usermodels:exploding"))
    assert r.exit_code == 2 and "internal error" not in r.stderr
    line = _line("is not supported")
    assert f"exploding() raised ValueError: width 16 is not supported at usermodels.py:{line} in exploding" in r.stderr
    assert r.stderr.count("\n") == 1 and not (user / "run").exists()
    debug = invoke(["train", "--debug", *_args(user / "run", "model.import=usermodels:exploding")[1:]])
    assert debug.exit_code == 2 and "Traceback (most recent call last)" in debug.stderr and f'usermodels.py", line {line}' in debug.stderr


def test_a_dataset_failing_mid_run_is_blamed_and_the_run_records_failed(user):
    r = invoke(_args(user / "run", "data.import=usermodels:broken_data", "data.name=digits", "data.args={}"))
    assert r.exit_code == 2, r.stderr
    line = _line("is missing")
    assert "your code raised KeyError: 'sample" in r.stderr and f"usermodels.py:{line} in __getitem__" in r.stderr
    s = summary(user / "run")
    assert s["status"] == "failed" and f"usermodels.py:{line}" in s["error"] and s["steps"] >= 1
    assert events(user / "run")[-1]["kind"] == "end" and events(user / "run")[-1]["status"] == "failed"


def test_a_forward_without_logits_names_the_type_and_fails_the_run(user):
    r = invoke(_args(user / "run", "model.import=usermodels:text_model"))
    assert r.exit_code == 2
    assert "the model's forward returned a str; expected a tensor of logits" in r.stderr
    assert summary(user / "run")["status"] == "failed"


def test_last_position_logits_for_lm_say_so(user):
    r = invoke(_args(user / "run", "model.import=usermodels:last_only", "data.name=synthetic_tokens",
                     "data.args={num_samples: 64, seq_len: 8, vocab_size: 32}"))
    assert r.exit_code == 2
    assert "task=lm: the model returned logits for the last position only: logits (8, 1, 32) against targets (8, 8)" in r.stderr


def test_a_wider_head_warns_at_the_first_step_and_a_narrower_one_stops(user):
    r = invoke(_args(user / "run", "model.args={classes: 10}"))
    assert r.exit_code == 0, r.stderr
    warned = [e for e in events(user / "run") if e["kind"] == "warning" and "10 logits" in e["message"]]
    assert len(warned) == 1 and "number of classes is 4" in warned[0]["message"]
    r = invoke(_args(user / "run2", "model.args={classes: 2}"))
    assert r.exit_code == 2 and "the model outputs 2 logits per position but the data's number of classes is 4" in r.stderr


def test_activation_checkpointing_without_blocks_is_a_warning_event(user):
    r = invoke([*_args(user / "run", "distributed.activation_checkpointing=true")[:1], *_args(user / "run",
               "distributed.activation_checkpointing=true")[1:]])
    assert r.exit_code == 0, r.stderr
    warned = [e["message"] for e in events(user / "run") if e["kind"] == "warning"]
    assert any("no blocks found" in m and "distributed.blocks" in m for m in warned), warned


def test_a_bad_distributed_blocks_stops_before_the_run_dir(user):
    r = invoke(_args(user / "run", "distributed.blocks=Blok"))
    assert r.exit_code == 2 and "distributed.blocks='Blok' is not valid" in r.stderr
    assert not (user / "run").exists()


@pytest.mark.parametrize("spec,expected", [
    ("badsyntax:build", "importing 'badsyntax' failed at badsyntax.py:1: SyntaxError"),
    ("reraises:build", "importing 'reraises' failed at reraises.py:1 in <module>"),
    ("notthere:build", "module 'notthere' not found"),
])
def test_import_failures_show_the_real_cause(user, spec, expected):
    r = invoke(_args(user / "run", f"model.import={spec}"))
    assert r.exit_code == 2 and expected in r.stderr, r.stderr


def test_flops_are_counted_for_a_user_model_and_recorded(user):
    r = invoke([*_args(user / "run"), "--json"])
    assert r.exit_code == 0, r.stderr
    s = json.loads(r.stdout)
    # Linear 16->16 and 16->4: 2*(256+64) per sample forward, x3 for forward + backward (no input grad: x2 for layer 1)
    assert s["flops_source"] == "counted" and s["flops_per_sample"] == 2 * 256 * 2 + 2 * 64 * 3
    start = [e for e in events(user / "run") if e["kind"] == "start"][0]
    assert start["flops_source"] == "counted" and start["flops_per_sample"] == s["flops_per_sample"]


@pytest.mark.parametrize("item,named", [
    ("(torch.randn(16), 1, 'extra')", "is a tuple of 3"),
    ("{'input_ids': torch.randn(16), 'labels': 1}", "is a dict with keys ['input_ids', 'labels']"),
    ("torch.randn(16)", "is a Tensor"),
])
def test_dataset_items_that_are_not_pairs_are_named(user, item, named):
    (user / "oddmod.py").write_text(textwrap.dedent(f'''
        import torch
        class Odd(torch.utils.data.Dataset):
            num_classes = 4
            def __len__(self):
                return 16
            def __getitem__(self, i):
                return {item}
        def data():
            return Odd(), None
    '''))
    try:
        r = invoke(_args(user / "run", "data.import=oddmod:data", "data.args={}"))
    finally:
        sys.modules.pop("oddmod", None)
    assert r.exit_code == 2 and f"item 0 of the training dataset {named}; each item must be an (input, target) pair" in r.stderr


def test_a_distributed_failure_inside_forward_is_not_blamed_on_the_user():
    from rubin.workloads import blame

    def forward():  # this test file is "user code": only the kind of error decides
        raise RuntimeError("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:4321")

    try:
        forward()
    except RuntimeError as err:
        assert blame(err) is None
    try:
        raise ValueError("bad width")
    except ValueError as err:
        assert "your code raised ValueError: bad width at " in str(blame(err))


def assert_first_step_refused(r, needle: str, source: str):
    assert r.exit_code == 2, r.stderr
    assert "internal error" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert needle in r.stderr and source in r.stderr


def test_a_model_of_the_wrong_input_width_is_the_users_error(user):
    r = invoke(_args(user / "run", "data.args={num_samples: 128, features: 8, num_classes: 4}"))
    assert_first_step_refused(r, "your code raised RuntimeError: mat1 and mat2 shapes cannot be multiplied",
                        "at the first step (model.import='usermodels:build')")
    assert summary(user / "run")["status"] == "failed"


def test_a_model_without_trainable_parameters_is_refused_before_training(user):
    r = invoke(_args(user / "run", "model.import=usermodels:frozen"))
    assert r.exit_code == 2 and "returned a model with no trainable parameters" in r.stderr
    assert "does not require grad" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_label_of_minus_one_is_the_datasets_error(user):
    r = invoke(_args(user / "run", "data.import=usermodels:minus_one", "data.name=digits", "data.args={}"))
    assert_first_step_refused(r, "Target -1 is out of bounds", "data.import='usermodels:minus_one'")


def test_one_class_is_refused(user):
    r = invoke(_args(user / "run", "data.args={num_samples: 128, features: 16, num_classes: 1}"))
    assert r.exit_code == 2 and "data.args.num_classes=1 is not valid: at least 2" in r.stderr
    assert not (user / "run").exists()
    r = invoke(_args(user / "run", "data.import=usermodels:no_path", "data.name=digits", "data.args={}", "data.num_classes=1"))
    assert r.exit_code == 2 and "data.num_classes=1 is not valid" in r.stderr


def test_data_path_goes_to_a_factory_that_takes_it_and_is_refused_by_one_that_does_not(user):
    ok = invoke(_args(user / "run", "data.import=usermodels:with_path", "data.name=digits", "data.args={}",
                      "data.path=the-data"))
    assert ok.exit_code == 0, ok.stderr
    r = invoke(_args(user / "run2", "data.import=usermodels:no_path", "data.name=digits", "data.args={}",
                     "data.path=the-data"))
    assert r.exit_code == 2 and "data.path='the-data' is not used: data.import='usermodels:no_path' takes no 'path'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
