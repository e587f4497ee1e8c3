"""The collectives sweep on 2 real gloo ranks started by rubin through torchrun, with verification."""

import pytest
import torch

from rubin.bench import busbw, collectives, collectives_worker
from rubin.bench.suites import Context


def _ctx():
    return Context(device=torch.device("cpu"), devices=[torch.device("cpu")], gpu_count=0)


@pytest.mark.slow
def test_sweep_on_two_gloo_ranks_verifies_every_result():
    sizes = [4096, 65536]
    params = {"ops": list(busbw.OPS), "sizes": sizes, "ranks": 2, "warmup": 1, "trials": 3, "iters": 2,
              "dtype": "float32", "timeout_s": 120}
    out = collectives.run(params, _ctx())
    rows = out["rows"]
    assert {(r["op"], r["bytes"]) for r in rows} == {(op, s) for op in busbw.OPS for s in sizes}
    assert "error" not in out
    assert out["method"]["backend"] == "gloo" and out["method"]["ranks"] == 2
    for r in rows:
        assert r["ranks"] == 2 and r["verified"] and r["wrong"] == 0
        # algbw = bytes / time and busbw = algbw x factor, on the medians.
        t = r["time_us"]["median"] / 1e6
        assert r["algbw_gbps"]["median"] == pytest.approx(r["bytes"] / t / 1e9, rel=1e-9)
        assert r["busbw_gbps"]["median"] == pytest.approx(r["algbw_gbps"]["median"] * busbw.busbw_factor(r["op"], 2))
        assert r["time_us"]["ci95"][0] <= r["time_us"]["median"] <= r["time_us"]["ci95"][1]
    assert set(out["summary"]) == set(busbw.OPS)


class _BrokenDist:
    """A process group that returns without communicating: every check must then see wrong data."""

    def all_reduce(self, t):
        pass

    def broadcast(self, t, src):
        t.fill_(7)

    def all_gather_single(self, out, inp):
        out.zero_()

    def reduce_scatter_single(self, out, inp):
        out.copy_(inp[: out.numel()])

    def all_to_all_single(self, out, inp):
        out.copy_(inp)


@pytest.mark.parametrize("op", busbw.OPS)
def test_verification_catches_a_collective_that_computes_the_wrong_thing(op):
    world, count = 2, 8
    inp, out = collectives_worker._buffers(torch, op, count, world, torch.float32, "cpu")
    wrong = collectives_worker._verify(torch, _BrokenDist(), op, inp, out, rank=1, world=world)
    assert wrong > 0


class _LoopbackDist:
    """world=1 semantics: every op is the identity, which is the correct answer for one rank."""

    def all_reduce(self, t):
        pass

    def broadcast(self, t, src):
        pass

    def all_gather_single(self, out, inp):
        out.copy_(inp)

    def reduce_scatter_single(self, out, inp):
        out.copy_(inp)

    def all_to_all_single(self, out, inp):
        out.copy_(inp)


@pytest.mark.parametrize("op", busbw.OPS)
def test_verification_accepts_a_correct_single_rank_result(op):
    inp, out = collectives_worker._buffers(torch, op, 8, 1, torch.float32, "cpu")
    assert collectives_worker._verify(torch, _LoopbackDist(), op, inp, out, rank=0, world=1) == 0


def test_bad_parameters_are_usage_errors():
    from rubin.errors import UsageError

    with pytest.raises(UsageError, match=r"collectives.ranks=1"):
        collectives.run({"ops": ["all_reduce"], "sizes": [4], "ranks": 1, "warmup": 0, "trials": 1, "iters": 1}, _ctx())
    with pytest.raises(UsageError, match=r"collectives.ops='allreduce'"):
        collectives.run({"ops": ["allreduce"], "sizes": [4], "ranks": 2, "warmup": 0, "trials": 1, "iters": 1}, _ctx())


def test_hung_ranks_time_out_with_one_line(monkeypatch, tmp_path):
    import subprocess

    from rubin.errors import RubinError

    def hang(*a, **k):
        raise subprocess.TimeoutExpired(cmd="torchrun", timeout=k.get("timeout"))

    monkeypatch.setattr(subprocess, "run", hang)
    params = {"ops": ["all_reduce"], "sizes": [4], "ranks": 2, "warmup": 0, "trials": 1, "iters": 1, "timeout_s": 3}
    with pytest.raises(RubinError, match=r"did not finish within 3 s"):
        collectives.launch(params, device="cpu", workdir=tmp_path)


def test_a_single_gpu_skips_collectives_with_the_reason():
    from rubin.bench import suites

    ctx = Context(device=torch.device("cpu"), devices=[torch.device("cpu")], gpu_count=1)
    entry = suites.run_one("collectives", ctx, {"ops": ["all_reduce"], "sizes": [4], "ranks": 1, "warmup": 0,
                                                "trials": 1, "iters": 1})
    assert entry["status"] == "skipped" and "at least 2 local GPUs" in entry["notes"][0]
