"""The chunked linear + cross-entropy: same loss and gradients as the plain head, without the full logits."""

import pytest
import torch
import torch.nn.functional as F

from rubin.errors import UsageError
from rubin.workloads import DataInfo, build_model
from rubin.workloads.fused_loss import FusedHead, find_head, fused_lm_loss, install, linear_cross_entropy


@pytest.mark.parametrize("chunk", [1, 13, 1000])
def test_loss_and_gradients_match_the_plain_head(chunk):
    torch.manual_seed(0)
    h = torch.randn(4, 37, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 50, (4, 37))
    t[0, :5] = -100  # ignored positions count neither in the loss nor in the mean
    loss = linear_cross_entropy(h, w, t, chunk=chunk)
    gh, gw = torch.autograd.grad(2.5 * loss, (h, w))
    ref = F.cross_entropy((h @ w.t()).reshape(-1, 50), t.reshape(-1))
    rh, rw = torch.autograd.grad(2.5 * ref, (h, w))
    assert float(loss) == pytest.approx(float(ref), rel=1e-6)
    torch.testing.assert_close(gh, rh, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(gw, rw, rtol=1e-6, atol=1e-7)


def test_under_bf16_autocast_it_tracks_the_plain_loss():
    torch.manual_seed(0)
    h = torch.randn(64, 32, requires_grad=True)
    w = torch.randn(100, 32, requires_grad=True)
    t = torch.randint(0, 100, (64,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = linear_cross_entropy(h, w, t, chunk=16)
        ref = F.cross_entropy((h @ w.t()).float(), t)
    assert loss.dtype == torch.float32
    assert float(loss) == pytest.approx(float(ref), rel=2e-2)
    loss.backward()
    assert h.grad.dtype == torch.float32 and w.grad.dtype == torch.float32  # back through the cast to the fp32 weights


def _grads(loss_fn, h0, w0):
    h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(h, w)
    loss.backward()
    return h.grad, w.grad


def _rel(a, b) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def test_under_bf16_autocast_the_weight_gradient_is_rounded_once_as_the_plain_heads_is():
    """The chunks' weight-gradient products are summed in fp32 and rounded to bf16 once: the plain head's
    single matmul. Rounded per chunk first, the error against the exact gradient was about 10% larger."""
    torch.manual_seed(0)
    h0, w0 = torch.randn(512, 64), 0.1 * torch.randn(1000, 64)
    t = torch.randint(0, 1000, (512,))
    t[::7] = -100
    fused_h, fused_w = _grads(lambda h, w: linear_cross_entropy(h, w, t, chunk=64), h0, w0)
    ref_h, ref_w = _grads(lambda h, w: F.cross_entropy(F.linear(h, w).float(), t), h0, w0)
    h64, w64 = h0.double().requires_grad_(), w0.double().requires_grad_()
    F.cross_entropy(F.linear(h64, w64), t).backward()
    assert _rel(fused_w, w64.grad) <= 1.01 * _rel(ref_w, w64.grad)  # no worse than the plain head's bf16 gradient
    assert _rel(fused_w, ref_w) < 5e-4  # and, element for element, the same bf16 rounding of nearly the same sum
    assert _rel(fused_h, ref_h) < 5e-4


def test_a_batch_whose_targets_are_all_ignored_is_nan_as_the_plain_loss_is():
    """So the NaN policy sees a step that trains on nothing; its gradients are zero, as F.cross_entropy's are."""
    h = torch.randn(6, 8, requires_grad=True)
    w = torch.randn(10, 8, requires_grad=True)
    t = torch.full((6,), -100)
    loss = linear_cross_entropy(h, w, t, chunk=4)
    ref = F.cross_entropy(F.linear(h, w), t)
    assert torch.isnan(loss) and torch.isnan(ref)
    gh, gw = torch.autograd.grad(loss, (h, w))
    rh, rw = torch.autograd.grad(ref, (h, w))
    assert torch.equal(gh, rh) and torch.equal(gw, rw) and not gh.abs().sum()


def test_backward_never_holds_a_full_logits_tensor():
    h = torch.randn(512, 16, requires_grad=True)
    w = torch.randn(1000, 16, requires_grad=True)
    t = torch.randint(0, 1000, (512,))
    sizes = []

    def pack(x):
        sizes.append(x.numel())
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        linear_cross_entropy(h, w, t, chunk=64).backward()
    assert max(sizes) < 512 * 1000 / 4  # what autograd keeps: inputs and one value per token, no (tokens x vocab)


@pytest.mark.parametrize("name", ["gpt", "llama"])
def test_rubins_lms_give_the_plain_loss_and_gradients_through_their_own_forward(name):
    torch.manual_seed(0)
    args = {"n_layer": 1} if name == "llama" else {"n_layer": 1, "n_head": 2, "n_embd": 32}
    m = build_model(name, args, DataInfo.lm(16, 64)).double()
    x, y = torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 16))
    ref = F.cross_entropy(m(x).flatten(0, 1), y.flatten())
    ref_grads = torch.autograd.grad(ref, list(m.parameters()))
    keys = list(m.state_dict())
    loss = fused_lm_loss(m, x, y, chunk=7)
    grads = torch.autograd.grad(loss, list(m.parameters()))
    assert float(loss) == pytest.approx(float(ref), rel=1e-9)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b)
    assert isinstance(m.lm_head, FusedHead) and list(m.state_dict()) == keys  # checkpoints keep their layout
    assert m(x).shape == (2, 16, 64)  # without targets (evaluation) the head gives logits again


def test_a_model_that_slices_positions_before_the_head_gets_one_line():
    class LastOnly(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.lm_head = torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False)

        def forward(self, x):
            return self.lm_head(self.emb(x)[:, -1:])

    with pytest.raises(UsageError, match="model.fused_loss=false"):
        fused_lm_loss(LastOnly(), torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 5, dtype=torch.long))


def test_heads_the_fused_loss_cannot_take_say_why():
    biased = torch.nn.Module()
    biased.lm_head = torch.nn.Linear(4, 10)
    assert find_head(biased) == (None, "its lm_head has a bias")
    assert find_head(torch.nn.Linear(4, 4))[0] is None
    capped = torch.nn.Module()
    capped.lm_head = torch.nn.Linear(4, 10, bias=False)
    capped.config = type("Cfg", (), {"final_logit_softcapping": 30.0})()
    assert "final_logit_softcapping" in find_head(capped)[1]
    with pytest.raises(ValueError, match="no output head"):
        install(torch.nn.Linear(4, 4))


def test_a_hugging_face_causal_lm_gets_the_plain_loss():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64, n_positions=16)
    torch.manual_seed(0)
    m = transformers.GPT2LMHeadModel(cfg).eval()
    x, y = torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 16))
    ref = F.cross_entropy(m(x).logits.flatten(0, 1), y.flatten())
    assert float(fused_lm_loss(m, x, y, chunk=5)) == pytest.approx(float(ref), rel=1e-5)
