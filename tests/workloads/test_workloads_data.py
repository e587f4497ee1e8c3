"""Built-in datasets: digits, synthetic images / vectors / tokens, and build_data's errors."""

import numpy as np
import pytest
import torch

from rubin.errors import UsageError
from rubin.workloads import DATASETS, DataInfo, build_data, info_from_dataset


def _all(ds):
    xs, ys = zip(*(ds[i] for i in range(len(ds))))
    return torch.stack(xs), torch.stack(ys)


def test_digits_is_the_real_dataset_with_a_stratified_eval_split():
    train, held, info = build_data("digits", None, {}, seed=0)
    assert info == DataInfo.classification((1, 8, 8), 10)
    assert len(train) + len(held) == 1797
    assert len(held) == pytest.approx(0.2 * 1797, abs=6)
    x, y = _all(train)
    assert x.shape == (len(train), 1, 8, 8) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert abs(x.mean().item()) < 1e-3 and x.std().item() == pytest.approx(1.0, abs=1e-2)
    counts = torch.bincount(_all(held)[1], minlength=10)
    assert counts.min() >= 34 and counts.max() <= 38  # every class ~20% held out


def test_digits_split_depends_on_split_seed_not_on_the_run_seed():
    _, held_a, _ = build_data("digits", None, {}, seed=0)
    _, held_b, _ = build_data("digits", None, {}, seed=123)
    _, held_c, _ = build_data("digits", None, {"split_seed": 1}, seed=0)
    xa, xb, xc = _all(held_a)[0], _all(held_b)[0], _all(held_c)[0]
    assert torch.equal(xa, xb)
    assert not torch.equal(xa, xc)


def test_digits_are_sklearns_digits_and_train_and_eval_partition_them():
    import os

    saved = dict(os.environ)
    from sklearn.datasets import load_digits

    os.environ.clear()
    os.environ.update(saved)  # importing sklearn sets KMP_* variables; keep this test hermetic
    bunch = load_digits()
    train, held, _ = build_data("digits", None, {"eval_fraction": 0.25}, seed=0)
    assert len(held) == pytest.approx(0.25 * 1797, abs=6)
    # Every sklearn image appears exactly as often in train + eval as in sklearn (after the
    # affine standardization, which preserves equality), and the labels agree.
    xt, yt = _all(train)
    xe, ye = _all(held)
    x = torch.cat([xt, xe]).flatten(1)
    y = torch.cat([yt, ye])
    lo = x.min()
    raw = torch.from_numpy(bunch.data).float()
    scale = (x.max() - lo) / raw.max()
    recovered = torch.round((x - lo) / scale)
    ours = sorted(zip(map(tuple, recovered.int().tolist()), y.tolist()))
    theirs = sorted(zip(map(tuple, raw.int().tolist()), bunch.target.tolist()))
    assert ours == theirs


def test_digits_without_eval():
    train, held, _ = build_data("digits", None, {"eval_fraction": 0.0}, seed=0)
    assert len(train) == 1797 and held is None


@pytest.mark.parametrize("name,args", [
    ("synthetic_images", {"num_samples": 64, "image_size": 8, "channels": 2, "num_classes": 4}),
    ("synthetic", {"num_samples": 64, "features": 12, "num_classes": 5}),
    ("synthetic_tokens", {"num_samples": 16, "seq_len": 32, "vocab_size": 50}),
])
def test_synthetic_data_is_deterministic_and_leaves_the_global_rng_alone(name, args):
    state = torch.get_rng_state()
    np_state = np.random.get_state()[1].copy()
    a, ea, _ = build_data(name, None, args, seed=7)
    b, _, _ = build_data(name, None, args, seed=7)
    c, _, _ = build_data(name, None, args, seed=8)
    for i in (0, 5, 13):
        assert all(torch.equal(u, v) for u, v in zip(a[i], b[i]))
        assert all(torch.equal(u, v) for u, v in zip(a[i], a[i]))  # same index, same sample, every time
    assert not torch.equal(_all(a)[0], _all(c)[0])
    assert not torch.equal(a[0][0], ea[0][0])  # eval is its own stream, not a copy of train
    assert torch.equal(state, torch.get_rng_state())
    assert np.array_equal(np_state, np.random.get_state()[1])


def test_synthetic_images_are_learnable():
    train, held, info = build_data("synthetic_images", None, {"num_samples": 400, "image_size": 8}, seed=0)
    assert info == DataInfo.classification((3, 8, 8), 10) and len(held) == 40
    x, y = _all(train)
    assert y.dtype == torch.int64 and set(y.tolist()) == set(range(10))
    # A nearest-class-mean classifier fit on train must do well on eval: there is a rule to learn.
    means = torch.stack([x[y == c].mean(0) for c in range(10)]).flatten(1)
    xe, ye = _all(held)
    pred = torch.cdist(xe.flatten(1), means).argmin(1)
    assert (pred == ye).float().mean() > 0.9


def test_synthetic_vectors_are_learnable():
    train, held, info = build_data("synthetic", None, {"num_samples": 2000, "features": 8, "num_classes": 3}, seed=0)
    x, y = _all(train)
    w = torch.linalg.lstsq(x, torch.nn.functional.one_hot(y, 3).float()).solution
    xe, ye = _all(held)
    assert ((xe @ w).argmax(1) == ye).float().mean() > 0.8


def test_synthetic_tokens_are_shifted_and_bigram_learnable():
    train, held, info = build_data("synthetic_tokens", None, {"num_samples": 64, "seq_len": 64, "vocab_size": 40},
                                   seed=0)
    assert info == DataInfo.lm(64, 40) and info.tokens_per_sample == 64
    x, y = train[3]
    assert x.shape == y.shape == (64,) and x.dtype == torch.int64
    assert torch.equal(x[1:], y[:-1])
    # Count bigrams on train and predict eval next tokens with them: far better than chance (1/40).
    xs, ys = _all(train)
    table = torch.zeros(40, 40)
    table.index_put_((xs.flatten(), ys.flatten()), torch.ones(xs.numel()), accumulate=True)
    xe, ye = _all(held)
    acc = (table.argmax(1)[xe] == ye).float().mean()
    assert acc > 0.8


def test_unknown_dataset_suggests_the_name():
    with pytest.raises(UsageError, match=r"data\.name='digit' .*did you mean 'digits'.*allowed: .*image_folder"):
        build_data("digit", None, {}, seed=0)


def test_unknown_dataset_argument_lists_the_allowed_ones():
    with pytest.raises(UsageError, match=r"data\.args\.eval_frac .*did you mean 'eval_fraction'.*split_seed"):
        build_data("digits", None, {"eval_frac": 0.1}, seed=0)


@pytest.mark.parametrize("name", [n for n, b in DATASETS.items() if getattr(b, "needs_path", None)])
def test_missing_path_names_data_path_and_the_fix(name, tmp_path):
    with pytest.raises(UsageError, match=r"^data\.path=None .*set --set data\.path=PATH$"):
        build_data(name, None, {}, seed=0)
    with pytest.raises(UsageError, match=r"^data\.path='.*nope' is not valid: no such file or directory"):
        build_data(name, str(tmp_path / "nope"), {}, seed=0)


def test_path_for_a_built_in_dataset_is_refused(tmp_path):
    with pytest.raises(UsageError, match=r"data\.path=.* dataset 'digits' takes no path"):
        build_data("digits", str(tmp_path), {}, seed=0)


@pytest.mark.parametrize("args,match", [
    ({"eval_fraction": 1.5}, r"data\.args\.eval_fraction=1\.5 .*\[0\.0, 1\.0\)"),
    ({"eval_fraction": "0.1"}, r"data\.args\.eval_fraction='0\.1' .*a number \(default 0\.2\)"),
])
def test_bad_dataset_values(args, match):
    with pytest.raises(UsageError, match=match):
        build_data("digits", None, args, seed=0)


def test_info_from_a_user_dataset():
    train, _, _ = build_data("digits", None, {}, seed=0)
    assert info_from_dataset(train) == DataInfo.classification((1, 8, 8), 10)
    seqs = torch.randint(0, 11, (4, 9))
    tokens = torch.utils.data.TensorDataset(seqs[:, :-1], seqs[:, 1:])
    with pytest.raises(UsageError, match="vocab size"):
        info_from_dataset(tokens)
    assert info_from_dataset(tokens, vocab_size=11) == DataInfo.lm(8, 11)
    plain = torch.utils.data.TensorDataset(torch.randn(6, 3), torch.tensor([0, 1, 4, 1, 0, 2]))
    assert info_from_dataset(plain).num_classes == 5
