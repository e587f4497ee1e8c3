"""run.gc_every_steps: Python's collector runs at step boundaries only, and is given back at the end."""

import gc

import pytest
import torch
from faultkit import FAULT_CFG, train_args
from utils import invoke

from rubin.train import gcpolicy
from rubin.train.config import load_config
from rubin.train.data import GlobalBatchSampler, plan_batches, train_loader
from rubin.train.gcpolicy import GcPolicy


@pytest.fixture
def collections():
    """The generation of every collection Python runs while the test does, automatic or asked for."""
    seen = []

    def callback(phase, info):
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(callback)
    yield seen
    gc.callbacks.remove(callback)


def _cycles(n: int) -> None:
    for _ in range(n):
        a = []
        a.append(a)  # garbage only the cyclic collector can free


def test_collections_happen_at_step_boundaries_only(collections):
    assert gc.isenabled()
    policy = GcPolicy(5)
    policy.start()
    try:
        assert not gc.isenabled() and gc.get_freeze_count() > 0
        start = len(collections)  # the one full collection before the freeze
        for step in range(1, 101):
            _cycles(2000)  # far past the allocation threshold that would trigger automatic collections
            policy.step(step)
        during = collections[start:]
    finally:
        policy.stop()
    young, full = 1, 2
    assert during == [young] * 19 + [full]  # steps 5, 10, ..., 95 young; step 100 = 20 x 5 full
    assert policy.collections == 20
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_off_or_managed_by_the_caller_leaves_the_collector_alone():
    off = GcPolicy(None)
    off.start()
    assert gc.isenabled() and gc.get_freeze_count() == 0
    off.stop()
    gc.disable()
    try:
        managed = GcPolicy(10)
        managed.start()
        managed.stop()
        assert not gc.isenabled() and gc.get_freeze_count() == 0  # still the caller's choice
    finally:
        gc.enable()


class _CollectorState(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor(int(gc.isenabled())), torch.tensor(0)


def test_dataloader_workers_collect_for_themselves():
    cfg = load_config(None, ["data.num_workers=1", "data.batch_size=4"])
    sampler = GlobalBatchSampler(8, plan_batches(4, None, 1), 0, seed=0)
    loader = train_loader(_CollectorState(), sampler, cfg.data, torch.device("cpu"), seed=0)
    gc.disable()  # as the trainer has it while the loop runs; the worker is forked from this state
    try:
        it = iter(loader)
        try:
            enabled, _ = next(it)
        finally:
            del it
    finally:
        gc.enable()
    assert enabled.tolist() == [1, 1, 1, 1]


def test_the_trainer_runs_the_loop_with_automatic_collection_off(tmp_path, monkeypatch):
    states = []
    original = GcPolicy.step

    def spy(self, step):
        states.append((step, gc.isenabled()))
        original(self, step)

    monkeypatch.setattr(gcpolicy.GcPolicy, "step", spy)
    r = invoke(train_args(tmp_path / "run", FAULT_CFG, "run.gc_every_steps=4", "data.num_workers=0"))
    assert r.exit_code == 0, r.stderr[-2000:]
    assert [s for s, _ in states] == list(range(1, 13)) and not any(on for _, on in states)
    assert gc.isenabled() and gc.get_freeze_count() == 0


def _tracked(obj) -> bool:
    """OBJ is in one of the collector's generations (a frozen object is in none of them)."""
    return any(o is obj for o in gc.get_objects())


def test_objects_the_caller_froze_stay_frozen():
    # The freeze count is not a stable measure: a frozen object freed by its refcount (by a thread an
    # earlier test left, say) leaves the permanent generation. So follow one object of the caller's.
    mine = ["frozen by the caller"]  # a list is always tracked (a dict of strings may not be)
    gc.freeze()
    try:
        assert not _tracked(mine)
        policy = GcPolicy(10)
        policy.start()
        policy.stop()
        assert not _tracked(mine), "the policy unfroze the caller's objects"
        assert gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    assert _tracked(mine)
