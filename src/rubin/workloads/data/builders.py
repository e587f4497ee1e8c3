"""Dataset builders: ``builder(path, *, seed, cache_dir, **args) -> (train, eval | None, DataInfo)``.

Builders that read files declare ``needs_path``; the others refuse a path rather than silently
ignore it. Synthetic eval sets are drawn from their own stream, so they never overlap train.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from rubin.errors import bad_value
from rubin.workloads.arguments import fraction, positive_int
from rubin.workloads.info import DataInfo

F = "data.args"


def _eval_count(num_samples: int, eval_samples: Optional[int]) -> int:
    if eval_samples is None:
        return max(1, num_samples // 10)
    return positive_int(f"{F}.eval_samples", eval_samples, allow_zero=True)


def two_classes(num_classes: int, name: str = f"{F}.num_classes") -> None:
    """One class trains to loss 0 at once: cross-entropy over a single logit is always 0."""
    if num_classes < 2:
        raise bad_value(name, num_classes, "at least 2 (with one class the loss is 0 and nothing is learned)",
                        f"e.g. --set {name}=10")


def build_synthetic_images(path, *, seed: int, cache_dir=None, num_samples: int = 4096,
                           eval_samples: Optional[int] = None, image_size: int = 32, channels: int = 3,
                           num_classes: int = 10, noise: float = 1.0, augment: bool = False):
    from rubin.workloads.data.augment import RandomShiftNoise, check_augment
    from rubin.workloads.data.synthetic import SyntheticImages

    for name, v in (("num_samples", num_samples), ("image_size", image_size), ("channels", channels),
                    ("num_classes", num_classes)):
        positive_int(f"{F}.{name}", v)
    two_classes(num_classes)
    shape = (channels, image_size, image_size)
    n_eval = _eval_count(num_samples, eval_samples)
    train = SyntheticImages(num_samples, shape, num_classes, seed, stream=0, noise=noise)
    held = SyntheticImages(n_eval, shape, num_classes, seed, stream=1, noise=noise) if n_eval else None
    if check_augment(f"{F}.augment", augment):
        train = RandomShiftNoise(train, shift=max(1, image_size // 8))
    return train, held, DataInfo.classification(shape, num_classes)


def build_synthetic(path, *, seed: int, cache_dir=None, num_samples: int = 8192,
                    eval_samples: Optional[int] = None, features: int = 32, num_classes: int = 10):
    from rubin.workloads.data.synthetic import SyntheticVectors

    for name, v in (("num_samples", num_samples), ("features", features), ("num_classes", num_classes)):
        positive_int(f"{F}.{name}", v)
    two_classes(num_classes)
    n_eval = _eval_count(num_samples, eval_samples)
    train = SyntheticVectors(num_samples, features, num_classes, seed, stream=0)
    held = SyntheticVectors(n_eval, features, num_classes, seed, stream=1) if n_eval else None
    return train, held, DataInfo.classification((features,), num_classes)


def build_synthetic_tokens(path, *, seed: int, cache_dir=None, num_samples: int = 2048,
                           eval_samples: Optional[int] = None, seq_len: int = 128, vocab_size: int = 256,
                           noise: float = 0.1):
    from rubin.workloads.data.synthetic import SyntheticTokens

    for name, v in (("num_samples", num_samples), ("seq_len", seq_len), ("vocab_size", vocab_size)):
        positive_int(f"{F}.{name}", v)
    fraction(f"{F}.noise", noise, 0.0, 1.0 + 1e-9)
    n_eval = _eval_count(num_samples, eval_samples)
    train = SyntheticTokens(num_samples, seq_len, vocab_size, seed, stream=0, noise=noise)
    held = SyntheticTokens(n_eval, seq_len, vocab_size, seed, stream=1, noise=noise) if n_eval else None
    return train, held, DataInfo.lm(seq_len, vocab_size)


def build_digits(path, *, seed: int, cache_dir=None, eval_fraction: float = 0.2, split_seed: int = 0,
                 label_noise: float = 0.0, augment: bool = False):
    from rubin.workloads.data.augment import RandomShiftNoise, check_augment
    from rubin.workloads.data.digits import load_digits_split

    fraction(f"{F}.eval_fraction", eval_fraction)
    fraction(f"{F}.label_noise", label_noise)
    train, held = load_digits_split(eval_fraction, split_seed, label_noise)
    if check_augment(f"{F}.augment", augment):  # a 1-pixel shift and pixel noise, drawn in the loader's workers
        train = RandomShiftNoise(train, shift=1)
    return train, held, DataInfo.classification((1, 8, 8), 10)


def build_image_folder(path, *, seed: int, cache_dir=None, image_size: Optional[int] = None,
                       channels: int = 3, eval_dir: Optional[str] = None):
    from rubin.workloads.data.image_folder import load_image_folder

    if channels not in (1, 3):
        raise bad_value(f"{F}.channels", channels, "1 (grayscale) or 3 (RGB)", f"--set {F}.channels=3")
    if image_size is not None:
        positive_int(f"{F}.image_size", image_size)
    return load_image_folder(Path(path), cache_dir, image_size, channels, eval_dir)


def build_cifar10(path, *, seed: int, cache_dir=None, normalize: bool = True):
    from rubin.workloads.data.cifar10 import load_cifar10

    train, held = load_cifar10(Path(path), normalize)
    return train, held, DataInfo.classification((3, 32, 32), 10)


def build_tokens(path, *, seed: int, cache_dir=None, seq_len: int = 256, vocab_size: Optional[int] = None,
                 eval_fraction: float = 0.1, dtype: str = "uint16"):
    from rubin.workloads.data.tokens import load_tokens

    positive_int(f"{F}.seq_len", seq_len)
    if vocab_size is not None:
        positive_int(f"{F}.vocab_size", vocab_size)
    fraction(f"{F}.eval_fraction", eval_fraction)
    if dtype not in ("uint16", "uint32"):
        raise bad_value(f"{F}.dtype", dtype, "uint16 or uint32 (the .bin token width)", f"--set {F}.dtype=uint16")
    return load_tokens(Path(path), seq_len, vocab_size, eval_fraction, dtype)


for _b, _what in ((build_image_folder, "a directory root/<class>/<image>, or one with train/ and val/"),
                  (build_cifar10, "the CIFAR-10 python directory (data_batch_1..5, test_batch, batches.meta)"),
                  (build_tokens, "a text file (byte tokens) or a .bin file of uint16 tokens")):
    _b.needs_path = _what
