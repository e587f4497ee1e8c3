import pytest

from rubin.errors import UsageError
from rubin.train.data import GlobalBatchSampler, plan_batches


def _steps(sampler, plan):
    """Group a rank's indices into [step] lists (micro-batches of one step joined)."""
    micro = list(sampler)
    assert all(len(m) == plan.micro_batch for m in micro)
    idx = [i for m in micro for i in m]
    per_step = plan.accum_steps * plan.micro_batch
    return [idx[i : i + per_step] for i in range(0, len(idx), per_step)]


def test_plan_derives_micro_and_accumulation():
    p = plan_batches(32, 8, 1)
    assert (p.micro_batch, p.accum_steps) == (8, 4)
    p = plan_batches(32, None, 2)
    assert (p.micro_batch, p.accum_steps) == (16, 1)
    p = plan_batches(32, 4, 2)
    assert (p.micro_batch, p.accum_steps) == (4, 4)


def test_non_dividing_batches_are_errors():
    with pytest.raises(UsageError, match=r"data.batch_size=30 does not divide over 4 ranks"):
        plan_batches(30, None, 4)
    with pytest.raises(UsageError, match=r"data.micro_batch_size=5 does not divide the per-rank batch 16"):
        plan_batches(32, 5, 2)


@pytest.mark.parametrize("world,micro", [(1, 8), (2, 8), (2, 4), (4, 2)])
def test_every_world_size_sees_the_same_global_batches(world, micro):
    n, batch = 100, 16
    ref_plan = plan_batches(batch, None, 1)
    ref = _steps(GlobalBatchSampler(n, ref_plan, 0, seed=3), ref_plan)
    plan = plan_batches(batch, micro, world)
    per_rank = [_steps(GlobalBatchSampler(n, plan, r, seed=3), plan) for r in range(world)]
    assert len(ref) == n // batch
    for step in range(len(ref)):
        union = sorted(i for r in range(world) for i in per_rank[r][step])
        assert union == sorted(ref[step])


def test_epochs_are_reshuffled_deterministically():
    plan = plan_batches(10, None, 1)
    s = GlobalBatchSampler(50, plan, 0, seed=1)
    e0 = list(s)
    s.set_epoch(1)
    e1 = list(s)
    s2 = GlobalBatchSampler(50, plan, 0, seed=1)
    s2.set_epoch(1)
    assert e0 != e1
    assert list(s2) == e1


def test_resume_position_neither_replays_nor_skips():
    plan = plan_batches(8, 4, 1)
    full = list(GlobalBatchSampler(64, plan, 0, seed=0))
    s = GlobalBatchSampler(64, plan, 0, seed=0)
    s.set_epoch(0, start_sample=3 * 8)
    rest = list(s)
    assert rest == full[3 * 2 :]  # 2 micro-batches of 4 per step
    assert len(s) == len(rest)
