"""image_folder: class folders, train/val split, and an index cache that really avoids relisting."""

import json
import os
import time

import numpy as np
import pytest
import torch
from PIL import Image

from rubin.errors import UsageError
from rubin.workloads import DataInfo, build_data
from rubin.workloads.data import file_index

COLORS = {"cat": (255, 0, 0), "dog": (0, 0, 255), "emu": (0, 255, 0)}


def make_tree(root, classes=COLORS, per_class=3, size=(6, 4)):
    for name, color in classes.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            ext = "png" if i % 2 == 0 else "jpg"
            Image.new("RGB", size, color).save(root / name / f"{i}.{ext}")
    (root / next(iter(classes)) / "notes.txt").write_text("not an image")
    age(root)


def age(root, seconds=60):
    """Make every directory look changed a minute ago (a fresh tree is 'racy' and not trusted)."""
    past = time.time() - seconds
    for d, _, _ in os.walk(root):
        os.utime(d, (past, past))


@pytest.fixture
def count_listings(monkeypatch):
    calls = []
    real_scandir, real_listdir = os.scandir, os.listdir

    def scandir(path="."):
        calls.append(str(path))
        return real_scandir(path)

    def listdir(path="."):
        calls.append(str(path))
        return real_listdir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "listdir", listdir)
    return calls


def test_classes_samples_and_pixels(tmp_path):
    make_tree(tmp_path)
    train, held, info = build_data("image_folder", str(tmp_path), {}, seed=0)
    assert held is None
    assert info == DataInfo.classification((3, 4, 6), 3)
    assert train.classes == ["cat", "dog", "emu"] and len(train) == 9
    xs, ys = zip(*(train[i] for i in range(len(train))))
    assert sorted(int(y) for y in ys) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    for x, y in zip(xs, ys):
        assert x.shape == (3, 4, 6) and x.dtype == torch.float32
        # cat is red, dog blue, emu green: the brightest channel is the label's colour.
        expected = {0: 0, 1: 2, 2: 1}[int(y)]
        assert int(x.mean((1, 2)).argmax()) == expected
        assert x.max() <= 1.0 and x.min() >= -1.0


def test_resize_and_grayscale(tmp_path):
    make_tree(tmp_path)
    Image.new("RGB", (20, 20), (255, 0, 0)).save(tmp_path / "cat" / "big.png")
    age(tmp_path)
    train, _, info = build_data("image_folder", str(tmp_path), {"image_size": 8, "channels": 1}, seed=0)
    assert info.input_shape == (1, 8, 8)
    assert all(train[i][0].shape == (1, 8, 8) for i in range(len(train)))


def test_train_and_val_subfolders_make_the_eval_split(tmp_path):
    make_tree(tmp_path / "train")
    make_tree(tmp_path / "val", classes={"dog": (0, 0, 255), "emu": (0, 255, 0)}, per_class=2)
    train, held, info = build_data("image_folder", str(tmp_path), {}, seed=0)
    assert len(train) == 9 and len(held) == 4 and info.num_classes == 3
    # Eval targets use train's class numbering even though val/ has no "cat".
    assert sorted(int(held[i][1]) for i in range(4)) == [1, 1, 2, 2]


def test_val_class_missing_from_train_is_an_error(tmp_path):
    make_tree(tmp_path / "train", classes={"cat": (255, 0, 0)})
    make_tree(tmp_path / "val", classes={"cat": (255, 0, 0), "yak": (1, 2, 3)})
    with pytest.raises(UsageError, match=r"val/ has classes not in train/: yak"):
        build_data("image_folder", str(tmp_path), {}, seed=0)


def test_index_is_cached_next_to_the_data_and_a_restart_lists_nothing(tmp_path, count_listings):
    make_tree(tmp_path)
    count_listings.clear()
    first, _, _ = build_data("image_folder", str(tmp_path), {}, seed=0)
    assert len(count_listings) == 4  # the root and three class folders, once
    cache = tmp_path / file_index.INDEX_DIR / file_index.INDEX_NAME
    assert json.loads(cache.read_text())["classes"] == ["cat", "dog", "emu"]
    count_listings.clear()
    again, _, _ = build_data("image_folder", str(tmp_path), {}, seed=0)
    assert count_listings == []
    assert again.samples == first.samples and again.classes == first.classes


def test_a_changed_folder_is_listed_again(tmp_path, count_listings):
    make_tree(tmp_path)
    build_data("image_folder", str(tmp_path), {}, seed=0)
    Image.new("RGB", (6, 4), (0, 0, 255)).save(tmp_path / "dog" / "new.png")
    age(tmp_path / "dog", seconds=30)  # a new, different mtime that is not 'racy'
    count_listings.clear()
    train, _, _ = build_data("image_folder", str(tmp_path), {}, seed=0)
    assert len(train) == 10 and "dog/new.png" in [s[0] for s in train.samples]
    assert len(count_listings) == 4


def test_a_just_modified_folder_is_not_trusted(tmp_path, count_listings):
    make_tree(tmp_path)
    os.utime(tmp_path / "emu")  # changed 'now': a file could still land within the same mtime tick
    build_data("image_folder", str(tmp_path), {}, seed=0)
    count_listings.clear()
    build_data("image_folder", str(tmp_path), {}, seed=0)
    assert len(count_listings) == 4


def test_unwritable_data_dir_caches_in_cache_dir(tmp_path, count_listings):
    data, cache_dir = tmp_path / "data", tmp_path / "cache"
    make_tree(data)
    (data / file_index.INDEX_DIR).write_text("")  # a file where the index folder goes: unwritable even as root
    age(data)
    build_data("image_folder", str(data), {}, seed=0, cache_dir=str(cache_dir))
    cached = list(cache_dir.glob("image-index-*.json"))
    assert len(cached) == 1
    count_listings.clear()
    train, _, _ = build_data("image_folder", str(data), {}, seed=0, cache_dir=str(cache_dir))
    assert count_listings == [] and len(train) == 9


def test_an_empty_folder_says_what_it_looked_for(tmp_path):
    (tmp_path / "cat").mkdir()
    with pytest.raises(UsageError, match=r"data\.path=.* no images found in root/<class>/<file>"):
        build_data("image_folder", str(tmp_path), {}, seed=0)


def test_loads_through_a_dataloader_with_workers(tmp_path):
    make_tree(tmp_path)
    train, _, _ = build_data("image_folder", str(tmp_path), {}, seed=0)
    loader = torch.utils.data.DataLoader(train, batch_size=9, num_workers=1)
    x, y = next(iter(loader))
    assert x.shape == (9, 3, 4, 6) and np.array_equal(np.sort(y.numpy()), [0, 0, 0, 1, 1, 1, 2, 2, 2])
