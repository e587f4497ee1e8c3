import copy

import torch

from rubin.train.config import OptimConfig
from rubin.train.strategy import Precision, build_optimizer, lr_factor, param_groups


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 3))


def _one_step(model, prec, clip):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 6, generator=torch.Generator().manual_seed(1)) * 50
    y = torch.randint(0, 3, (32,), generator=torch.Generator().manual_seed(2))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    prec.backward(loss)
    prec.unscale(opt)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    prec.step(opt)
    return float(norm)


def test_fp16_path_clips_after_unscale_like_fp32():
    """The GradScaler path (run on CPU here) must give the fp32 update: clip sees true-scale grads."""
    fp32, scaled = _model(), _model()
    n32 = _one_step(fp32, Precision("fp32", torch.device("cpu")), clip=0.5)
    p16 = Precision("fp16", torch.device("cpu"), scaler_device="cpu", init_scale=2.0**12)
    n16 = _one_step(scaled, p16, clip=0.5)
    assert n32 > 0.5  # clipping is active in this case
    assert abs(n16 - n32) / n32 < 1e-5  # the norm clip saw was unscaled
    for a, b in zip(fp32.parameters(), scaled.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_clipping_before_unscale_would_differ():
    """The control: clipping scaled grads (the tutorial's bug) changes the update."""
    fp32, wrong = _model(), _model()
    _one_step(fp32, Precision("fp32", torch.device("cpu")), clip=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    opt = torch.optim.SGD(wrong.parameters(), lr=0.1)
    x = torch.randn(32, 6, generator=torch.Generator().manual_seed(1)) * 50
    y = torch.randint(0, 3, (32,), generator=torch.Generator().manual_seed(2))
    scaler.scale(torch.nn.functional.cross_entropy(wrong(x), y)).backward()
    torch.nn.utils.clip_grad_norm_(wrong.parameters(), 0.5)  # before unscale_: wrong
    scaler.step(opt)
    diffs = [float((a - b).detach().abs().max()) for a, b in zip(fp32.parameters(), wrong.parameters())]
    assert max(diffs) > 1e-3


def test_overflow_step_is_skipped_and_counted():
    m = _model()
    before = copy.deepcopy(m.state_dict())
    p16 = Precision("fp16", torch.device("cpu"), scaler_device="cpu")
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    loss = m(torch.randn(4, 6)).sum()
    p16.backward(loss)
    next(m.parameters()).grad[0, 0] = float("inf")
    p16.unscale(opt)
    assert p16.step(opt) is False
    assert p16.skipped_steps == 1
    for k, v in m.state_dict().items():
        assert torch.equal(v, before[k])


def test_no_weight_decay_on_norms_and_biases():
    m = _model()
    decay, no_decay = param_groups(m, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert {id(p) for p in decay["params"]} == {id(m[0].weight), id(m[2].weight)}
    assert len(no_decay["params"]) == 4  # two biases, LayerNorm weight and bias
    opt = build_optimizer(m, OptimConfig(name="adamw", lr=1e-3, weight_decay=0.1))
    assert isinstance(opt, torch.optim.AdamW)


def test_warmup_then_cosine_and_linear():
    kw = dict(warmup=10, total=110, min_ratio=0.0)
    assert lr_factor(0, schedule="cosine", **kw) == 0.1
    assert lr_factor(9, schedule="cosine", **kw) == 1.0
    assert abs(lr_factor(60, schedule="cosine", **kw) - 0.5) < 1e-9  # half way through the decay
    assert abs(lr_factor(60, schedule="linear", **kw) - 0.5) < 1e-9
    assert lr_factor(110, schedule="cosine", **kw) == 0.0
    assert lr_factor(50, schedule="constant", **kw) == 1.0
