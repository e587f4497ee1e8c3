"""AsyncCheckpointer in one process: snapshot semantics, one in flight (wait/skip), errors surface."""

import threading

import pytest
import torch

from rubin.errors import RubinError
from rubin.train.checkpoint import AsyncCheckpointer, CheckpointStore, load_file, save_file


def writer(snap, tmp):
    save_file(snap, tmp / "model.pt")


def test_written_state_is_the_snapshot_not_the_later_live_tensor(tmp_path):
    store = CheckpointStore(tmp_path, keep_last=5)
    ac = AsyncCheckpointer(store)
    w = torch.zeros(1000)
    gate = threading.Event()

    def slow(snap, tmp):
        gate.wait(10)
        writer(snap, tmp)

    assert ac.save(1, {"w": w}, slow, {})
    w.add_(5)  # the loop trains on while the save is in flight
    gate.set()
    ac.wait()
    assert torch.equal(load_file(tmp_path / "step-00000001" / "model.pt")["w"], torch.zeros(1000))
    assert ac.save(2, {"w": w}, writer, {}) and ac.wait() is None
    assert torch.equal(load_file(tmp_path / "step-00000002" / "model.pt")["w"], torch.full((1000,), 5.0))
    assert store.latest_valid()[0] == 2


@pytest.mark.parametrize("policy", ["wait", "skip"])
def test_one_save_in_flight_and_an_event_says_which(tmp_path, policy):
    events = []
    store = CheckpointStore(tmp_path, keep_last=5)
    ac = AsyncCheckpointer(store, on_event=lambda k, d: events.append((k, d)), policy=policy)
    gate = threading.Event()

    def slow(snap, tmp):
        gate.wait(10)
        writer(snap, tmp)

    ac.save(1, {"w": torch.ones(3)}, slow, {})
    threading.Timer(0.3, gate.set).start()
    second = ac.save(2, {"w": torch.ones(3)}, writer, {})
    ac.wait()
    steps = [s for s, _ in store.committed()]
    if policy == "skip":
        assert second is False and steps == [1]
        assert events[0][0] == "checkpoint_skipped" and events[0][1]["step"] == 2 and "step 1" in events[0][1]["reason"]
    else:
        assert second is True and steps == [1, 2]
        assert events[0][0] == "warning" and events[0][1]["waited_s"] > 0.1


def test_background_error_is_raised_on_the_next_call_and_tmp_removed(tmp_path):
    store = CheckpointStore(tmp_path, keep_last=5)
    ac = AsyncCheckpointer(store)

    def broken(snap, tmp):
        save_file(snap, tmp / "model.pt")
        raise RubinError("disk went away")

    ac.save(1, {"w": torch.ones(3)}, broken, {})
    with pytest.raises(RubinError, match="disk went away"):
        ac.wait()
    assert store.committed() == [] and not any(tmp_path.iterdir())
    ac.wait()  # raised once, not forever


def test_skip_falls_back_to_wait_with_several_ranks(tmp_path):
    events = []
    ac = AsyncCheckpointer(CheckpointStore(tmp_path, keep_last=1, world_size=2), on_event=lambda k, d: events.append(k), policy="skip")
    assert ac.policy == "wait" and events == ["warning"]
    with pytest.raises(RubinError, match="async_policy='later'"):
        AsyncCheckpointer(CheckpointStore(tmp_path, keep_last=1), policy="later")
