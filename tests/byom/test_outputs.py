"""The forward contract: every common output shape is accepted; each mismatch is one line naming shapes and task."""

from collections import OrderedDict
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from rubin.errors import UsageError
from rubin.workloads.contract.outputs import Objective, check_batch, logits_of, takes_targets

LOGITS = torch.arange(12.0).reshape(4, 3)


@pytest.mark.parametrize("output", [
    LOGITS,
    SimpleNamespace(logits=LOGITS, loss=None),  # an object with .logits (HF ModelOutput's attribute form)
    {"logits": LOGITS, "loss": torch.tensor(1.0)},
    OrderedDict(loss=torch.tensor(1.0), logits=LOGITS),  # HF ModelOutput is an OrderedDict with loss first
    (LOGITS, None),  # nanoGPT: (logits, loss)
    [LOGITS, torch.zeros(())],
])
def test_every_supported_output_yields_the_logits(output):
    assert logits_of(output) is LOGITS


@pytest.mark.parametrize("output,named", [
    ("text", "a str"),
    ({"scores": LOGITS}, "with keys ['scores']"),
    ((None, LOGITS), "a tuple of 2 whose first element is NoneType"),
    ([], "a list of 0"),
    (SimpleNamespace(hidden=LOGITS), "types.SimpleNamespace"),
])
def test_output_without_logits_names_what_came_back_and_what_is_expected(output, named):
    with pytest.raises(UsageError, match="expected a tensor of logits, an object with .logits") as err:
        logits_of(output)
    assert named in str(err.value) and "\n" not in str(err.value)


def test_last_position_logits_get_their_own_message():
    with pytest.raises(UsageError, match=r"task=lm: the model returned logits for the last position only: "
                                         r"logits \(2, 1, 50\) against targets \(2, 16\)"):
        check_batch("lm", torch.zeros(2, 1, 50), torch.zeros(2, 16, dtype=torch.long), 50)


@pytest.mark.parametrize("task,logits,target,match", [
    ("lm", (2, 15, 50), (2, 16), r"task=lm: logits have shape \(2, 15, 50\), targets \(2, 16\)"),
    ("lm", (2, 16, 50), (2,), r"task=lm: targets have shape \(2,\), expected \(batch, seq_len\)"),
    ("classification", (4, 10), (3,), r"task=classification: logits have shape \(4, 10\), targets \(3,\)"),
    ("classification", (4, 2, 10), (4,), r"logits have shape \(4, 2, 10\)"),
    ("classification", (4, 10), (4, 7), r"targets have shape \(4, 7\), expected \(batch,\) class indices"),
])
def test_shape_errors_name_both_shapes_and_the_task(task, logits, target, match):
    with pytest.raises(UsageError, match=match):
        check_batch(task, torch.zeros(*logits), torch.zeros(*target, dtype=torch.long), None)


def test_float_targets_are_a_dtype_error():
    with pytest.raises(UsageError, match=r"targets are torch.float32, shape \(4,\); cross-entropy needs integer"):
        check_batch("classification", torch.zeros(4, 3), torch.zeros(4), 3)


def test_class_count_wider_head_warns_and_narrower_head_stops():
    y = torch.tensor([0, 1, 9, 3])
    message = check_batch("classification", torch.zeros(4, 1000), y, 10)
    assert "1000 logits but the data's number of classes is 10" in message
    with pytest.raises(UsageError, match="outputs 5 logits per position but the data's number of classes is 10"):
        check_batch("classification", torch.zeros(4, 5), torch.tensor([0, 1, 2, 3]), 10)
    with pytest.raises(UsageError, match="a target is class 9 but the model outputs only 5 logits"):
        check_batch("classification", torch.zeros(4, 5), y, None)
    assert check_batch("classification", torch.zeros(4, 10), y, 10) is None
    assert check_batch("lm", torch.zeros(2, 8, 64), torch.zeros(2, 8, dtype=torch.long), 50) is None  # padded vocab: fine


def test_objective_warns_once_and_passes_targets_to_a_forward_that_takes_them():
    seen, warnings = [], []

    class NanoStyle(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 12)

        def forward(self, idx, targets=None):
            seen.append(targets)
            return self.lin(idx), None

    model = NanoStyle()
    obj = Objective("classification", 10, model, warn=warnings.append)
    x, y = torch.randn(4, 3), torch.tensor([0, 1, 2, 3])
    loss = obj(model, x, y)
    obj(model, x, y)
    assert seen[0] is y and len(warnings) == 1 and "12 logits" in warnings[0]
    expected = torch.nn.functional.cross_entropy(model.lin(x), y)
    assert torch.allclose(loss, expected)


def test_takes_targets_sees_through_ddp_and_compile_but_not_a_users_module_attribute():
    class Plain(nn.Module):
        def forward(self, x):
            return x

    class Nano(nn.Module):
        def forward(self, idx, targets=None):
            return idx

    class OptimizedModule(nn.Module):  # the shape of torch.compile's wrapper
        def __init__(self, inner):
            super().__init__()
            self._orig_mod = inner

    class UserWrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.module = Nano()

        def forward(self, x):
            return self.module(x)

    assert takes_targets(Nano()) and not takes_targets(Plain())
    assert takes_targets(OptimizedModule(Nano()))
    assert not takes_targets(UserWrapper())
