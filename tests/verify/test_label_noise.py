"""data.args.label_noise of the digits data set: the simulated data bug the verify power benchmark uses."""

from __future__ import annotations

import collections

import pytest

pytest.importorskip("sklearn", reason="the digits data set ships with scikit-learn (rubin[digits])")


def test_label_noise_shuffles_that_share_of_train_labels_only():
    from rubin.workloads.data.builders import build_digits

    clean_train, clean_eval, _ = build_digits(None, seed=0)
    noisy_train, noisy_eval, _ = build_digits(None, seed=0, label_noise=0.3)
    ya = [int(clean_train[i][1]) for i in range(len(clean_train))]
    yb = [int(noisy_train[i][1]) for i in range(len(noisy_train))]
    changed = sum(x != y for x, y in zip(ya, yb)) / len(ya)
    # 30% of the labels are permuted among themselves; about 1/10 land on their own class again.
    assert 0.22 < changed <= 0.30
    assert collections.Counter(ya) == collections.Counter(yb)  # a shuffle: class balance unchanged
    assert [int(clean_eval[i][1]) for i in range(len(clean_eval))] == [int(noisy_eval[i][1]) for i in range(len(noisy_eval))]
    assert all((clean_train[i][0] == noisy_train[i][0]).all() for i in range(0, len(ya), 97))  # images untouched


def test_label_noise_out_of_range_is_refused():
    from rubin.errors import UsageError
    from rubin.workloads.data.builders import build_digits

    with pytest.raises(UsageError, match=r"data.args.label_noise=1.5 is not valid"):
        build_digits(None, seed=0, label_noise=1.5)
