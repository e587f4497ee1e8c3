"""Worker-side random augmentation replays exactly after a resume (data.args.augment, SeededSamples)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from utils import run_rubin

from rubin import workloads
from rubin.train.config import load_config
from rubin.train.data import GlobalBatchSampler, plan_batches, sample_seed, train_loader


def _loader(num_workers: int, start_sample: int = 0, epoch: int = 0, augment: bool = True):
    cfg = load_config(None, [f"data.num_workers={num_workers}", "data.batch_size=16"])
    train, _, _ = workloads.build_data("digits", None, {"augment": augment}, seed=0, cache_dir=None)
    sampler = GlobalBatchSampler(len(train), plan_batches(16, None, 1), 0, seed=3)
    loader = train_loader(train, sampler, cfg.data, torch.device("cpu"), seed=3)
    sampler.set_epoch(epoch, start_sample)
    return loader


def _batches(loader, n: int) -> list[torch.Tensor]:
    it = iter(loader)
    try:
        return [next(it)[0] for _ in range(n)]
    finally:
        del it  # shuts the workers down


def test_sample_seed_separates_positions_and_epochs():
    seeds = {sample_seed(0, e, p) for e in range(3) for p in range(1000)}
    assert len(seeds) == 3000
    assert all(0 <= s < 2**63 for s in seeds)
    assert sample_seed(1, 0, 0) != sample_seed(0, 0, 0)


def test_augmentation_draws_in_workers_and_replays_from_any_position():
    plain = _batches(_loader(0, augment=False), 4)
    two = _batches(_loader(2), 4)
    assert not torch.equal(two[0], plain[0])  # the augmentation is applied
    one = _batches(_loader(1), 4)
    for a, b in zip(one, two):  # the same draws whichever worker loads a sample
        assert torch.equal(a, b)
    before = torch.get_rng_state()
    zero = _batches(_loader(0), 4)
    assert all(torch.equal(a, b) for a, b in zip(zero, two))  # and in the training process itself,
    assert torch.equal(torch.get_rng_state(), before)  # whose own RNG stream does not move
    resumed = _batches(_loader(2, start_sample=2 * 16), 2)  # a loader restarted at step 2, fresh workers
    assert torch.equal(resumed[0], two[2]) and torch.equal(resumed[1], two[3])
    next_epoch = _batches(_loader(2, epoch=1), 1)
    assert not torch.equal(next_epoch[0], two[0])  # new draws each epoch


def _args(run_dir, workers, *extra):
    sets = [
        f"run.dir={run_dir}", "run.max_steps=16", "run.epochs=null", "run.deterministic=true",
        "model.name=mlp", "model.args={hidden: 32, depth: 1}",
        "data.name=digits", "data.args={augment: true}", "data.batch_size=128", f"data.num_workers={workers}",
        "checkpoint.every_steps=4", "telemetry.log_every_steps=2", "run.eval_every_steps=0", *extra,
    ]
    return ["train", "--quiet", *[a for s in sets for a in ("--set", s)]]


def _summary(run_dir) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("workers", [2, 0])
def test_sigkill_mid_run_then_resume_matches_uninterrupted_run(tmp_path, workers):
    """11 steps per epoch: the kill at step 14 lands in epoch 1, after the checkpoint of step 12.

    With 0 workers the training process draws the augmentation itself, from its checkpointed RNG.
    """
    straight = tmp_path / "straight"
    p = run_rubin(_args(straight, workers))
    assert p.returncode == 0, p.stderr[-2000:]

    run = tmp_path / "killed"
    p = run_rubin(_args(run, workers), env={"RUBIN_FAULT": "crash@step=14"})
    assert p.returncode == -9, p.stderr[-2000:]  # a real SIGKILL
    assert not (run / "summary.json").exists()
    assert (run / "checkpoints" / "step-00000012" / "COMMITTED").exists()
    p = run_rubin(_args(run, workers))
    assert p.returncode == 0, p.stderr[-2000:]
    resumed = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert [e["step"] for e in resumed if e["kind"] == "resume"] == [12]
    assert _summary(run)["param_digest"] == _summary(straight)["param_digest"]


PREFETCH_DRIVER = Path(__file__).with_name("prefetch_driver.py")


def _prefetched(args, env=None) -> subprocess.CompletedProcess:
    """``rubin ARGS`` with the prefetcher loading one step ahead, as on CUDA (see prefetch_driver.py)."""
    full = {k: v for k, v in os.environ.items() if k != "RUBIN_FAULT"}
    full.update(OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.run([sys.executable, str(PREFETCH_DRIVER), *args], capture_output=True, text=True, env=full,
                          timeout=300)


@pytest.mark.slow
def test_sigkill_then_resume_with_the_cuda_prefetcher_and_no_workers_matches_uninterrupted_run(tmp_path):
    """The prefetcher loads batch k+1 before step k's checkpoint captures the RNG. With 0 workers the
    augmentation was drawn from the training process's RNG, so the resumed run drew batch k+1 again from
    a later state. Per-sample seeds make the draws independent of when a batch is loaded."""
    plain = tmp_path / "plain"
    p = run_rubin(_args(plain, 0))
    assert p.returncode == 0, p.stderr[-2000:]
    straight = tmp_path / "straight"
    p = _prefetched(_args(straight, 0))
    assert p.returncode == 0, p.stderr[-2000:]
    run = tmp_path / "killed"
    p = _prefetched(_args(run, 0), env={"RUBIN_FAULT": "crash@step=14"})
    assert p.returncode == -9, p.stderr[-2000:]  # a real SIGKILL, after the checkpoint of step 12
    assert (run / "checkpoints" / "step-00000012" / "COMMITTED").exists()
    p = _prefetched(_args(run, 0))
    assert p.returncode == 0, p.stderr[-2000:]
    resumed = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert [e["step"] for e in resumed if e["kind"] == "resume"] == [12]
    assert _summary(run)["param_digest"] == _summary(straight)["param_digest"]
    assert _summary(straight)["param_digest"] == _summary(plain)["param_digest"]  # loading ahead changes nothing
