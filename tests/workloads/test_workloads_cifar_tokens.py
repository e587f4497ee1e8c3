"""cifar10 pickle directories (generated here in the real format) and token files."""

import os
import pickle

import numpy as np
import pytest
import torch

from rubin.errors import UsageError
from rubin.workloads import DataInfo, build_data
from rubin.workloads.data.cifar10 import MEAN, STD

NAMES = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]


def make_cifar(folder, per_batch=4, seed=0):
    """A tiny CIFAR-10 python directory: the same dict layout, bytes keys and pickle protocol."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    batches = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"batch_label": name.encode(), b"labels": rng.integers(0, 10, per_batch).tolist(),
                 b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
                 b"filenames": [f"{i}.png".encode() for i in range(per_batch)]}
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)
        batches[name] = batch
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": NAMES, b"num_cases_per_batch": per_batch, b"num_vis": 3072}, f, protocol=2)
    return batches


def test_cifar10_reads_the_python_batches(tmp_path):
    batches = make_cifar(tmp_path / "cifar-10-batches-py")
    # Pointing at the parent (where the tarball was extracted) works too.
    train, held, info = build_data("cifar10", str(tmp_path), {}, seed=0)
    assert info == DataInfo.classification((3, 32, 32), 10)
    assert len(train) == 20 and len(held) == 4
    assert train.classes[:3] == ["airplane", "automobile", "bird"]
    raw = batches["data_batch_2"][b"data"][1].reshape(3, 32, 32)
    x, y = train[5]  # batch 2, row 1
    assert int(y) == batches["data_batch_2"][b"labels"][1]
    expected = (torch.from_numpy(raw).float() / 255 - torch.tensor(MEAN).view(3, 1, 1)) / torch.tensor(STD).view(3, 1, 1)
    assert torch.allclose(x, expected, atol=1e-6)
    assert int(held[3][1]) == batches["test_batch"][b"labels"][3]


def test_cifar10_without_normalization_is_unit_range(tmp_path):
    make_cifar(tmp_path)
    train, _, _ = build_data("cifar10", str(tmp_path), {"normalize": False}, seed=0)
    x = torch.stack([train[i][0] for i in range(len(train))])
    assert x.min() >= 0 and x.max() <= 1 and x.max() > 0.9


def test_cifar10_refuses_a_pickle_that_runs_code(tmp_path):
    make_cifar(tmp_path)
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    with open(tmp_path / "data_batch_3", "wb") as f:
        pickle.dump({b"data": Evil(), b"labels": []}, f, protocol=2)
    with pytest.raises(UsageError, match=r"data_batch_3 is not a CIFAR-10 python batch \(refusing to load"):
        build_data("cifar10", str(tmp_path), {}, seed=0)
    assert not marker.exists()


def test_cifar10_wrong_folder_says_what_it_needs(tmp_path):
    (tmp_path / "x").write_text("")
    with pytest.raises(UsageError, match=r"data_batch_1\.\.5 and test_batch.*cifar-10-batches-py"):
        build_data("cifar10", str(tmp_path), {}, seed=0)


def test_text_file_gives_byte_tokens_in_fixed_windows(tmp_path):
    text = "".join(chr(97 + i % 26) for i in range(1001))
    path = tmp_path / "input.txt"
    path.write_text(text)
    train, held, info = build_data("tokens", str(path), {"seq_len": 10, "eval_fraction": 0.2}, seed=0)
    assert info == DataInfo.lm(10, 256) and info.tokens_per_sample == 10
    assert len(train) + len(held) == 100 and len(held) == 20
    raw = torch.tensor(list(text.encode()))
    for i in (0, 1, 79):
        x, y = train[i]
        assert torch.equal(x, raw[i * 10:i * 10 + 10]) and torch.equal(y, raw[i * 10 + 1:i * 10 + 11])
    x, _ = held[0]  # eval is the tail of the file, after the last train window
    assert torch.equal(x, raw[800:810])
    with pytest.raises(IndexError):
        train[80]


def test_bin_file_is_memory_mapped_uint16(tmp_path):
    tokens = np.arange(0, 3000 * 17, 17, dtype=np.uint16) % 50000
    path = tmp_path / "train.bin"
    tokens.astype(np.uint16).tofile(path)
    train, held, info = build_data("tokens", str(path), {"seq_len": 64}, seed=0)
    assert info == DataInfo.lm(64, 50304)
    x, y = train[2]
    assert x.dtype == torch.int64 and torch.equal(x, torch.from_numpy(tokens[128:192].astype(np.int64)))
    assert torch.equal(y[:-1], x[1:])
    # Pickling (what a DataLoader worker gets) must not carry the mapped file's contents.
    train[0]
    assert len(pickle.dumps(train)) < 1000
    assert torch.equal(pickle.loads(pickle.dumps(train))[2][0], x)


def test_tokens_beyond_the_vocab_are_refused_with_the_fix(tmp_path):
    path = tmp_path / "t.bin"
    np.array([1, 2, 700, 3] * 100, dtype=np.uint16).tofile(path)
    with pytest.raises(UsageError, match=r"data\.args\.vocab_size=512 .*largest token 700.*vocab_size=701"):
        build_data("tokens", str(path), {"seq_len": 8, "vocab_size": 512}, seed=0)


def test_a_file_too_short_for_one_window(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text("hello")
    with pytest.raises(UsageError, match=r"data\.args\.seq_len=64 .*5 tokens"):
        build_data("tokens", str(path), {"seq_len": 64}, seed=0)
