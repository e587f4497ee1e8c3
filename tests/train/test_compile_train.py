"""rubin train with regional compile on a CPU (dynamo's "eager" backend: it traces, inductor does not run):
the summary says what dynamo compiled, with activation checkpointing and over evals with a partial batch,
and a compiler error during evaluation falls back to eager with one warning."""

import pytest
import torch
from faultkit import events, summary, train_args
from utils import invoke

from rubin.train.speed import compile as comp

# 12 eval samples (a tenth of 128) at batch 8: every eval ends with a partial batch of 4
LLAMA = ["model.name=llama", "model.args={n_layer: 2}", "data.name=synthetic_tokens",
         "data.args={num_samples: 128, seq_len: 16, vocab_size: 64}", "data.batch_size=8", "run.max_steps=6",
         "telemetry.log_every_steps=2", "run.eval_every_steps=2", "checkpoint.save_final=false",
         "run.deterministic=true", "distributed.compile=true"]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


REAL_COMPILE = comp.compile_blocks


def _with_backend(monkeypatch, backend):
    monkeypatch.setattr(comp, "compile_blocks", lambda blocks, **kw: REAL_COMPILE(blocks, **{**kw, "backend": backend}))


def _train(tmp_path, name, *extra):
    run = tmp_path / name
    r = invoke(train_args(run, LLAMA, *extra))
    assert r.exit_code == 0, r.stderr
    return summary(run)


def _compile_warnings(run) -> list[str]:
    return [e["message"] for e in events(run) if e["kind"] == "warning" and "torch.compile" in e.get("message", "")]


def test_activation_checkpointing_with_compile_compiles_the_blocks(tmp_path, monkeypatch):
    _with_backend(monkeypatch, "eager")
    s = _train(tmp_path, "ac", "distributed.activation_checkpointing=true")
    c = s["compile"]
    assert c["blocks"] == 2 and c["frames"] >= 1 and c["graphs"] >= 1 and c["fallback"] is None, c
    assert _compile_warnings(tmp_path / "ac") == []


def test_a_second_run_in_one_process_reuses_the_graphs_and_still_compiles(tmp_path, monkeypatch):
    _with_backend(monkeypatch, "eager")
    _train(tmp_path, "first")
    s = _train(tmp_path, "second")  # dynamo's cache serves it: no new frame, but the blocks do run compiled
    assert s["compile"]["blocks"] == 2 and s["compile"]["fallback"] is None, s["compile"]
    assert _compile_warnings(tmp_path / "second") == []


def test_graph_counts_over_evals_with_a_partial_last_batch(tmp_path, monkeypatch):
    _with_backend(monkeypatch, "eager")
    s = _train(tmp_path, "evals")
    c = s["compile"]
    # training, eval at batch 8, eval with the batch dimension dynamic (the partial 4); three evals reuse them
    assert c["graphs"] == 3 and c["recompiles"] == 2 and c["frames_eager"] == 0 and c["fallback"] is None, c
    assert s["eval"]["samples"] == 12 * 16  # every eval token, the partial batch's included


def test_a_compiler_error_during_evaluation_falls_back_to_eager_with_one_warning(tmp_path, monkeypatch):
    def train_only(gm, example_inputs):  # lowers training graphs, fails on evaluation's no-grad ones
        if not torch.is_grad_enabled():
            raise RuntimeError("this backend cannot lower an inference graph")
        return gm.forward

    _with_backend(monkeypatch, "eager")
    eager = _train(tmp_path, "eager-backend")
    torch._dynamo.reset()  # else the next run reuses this one's graphs, and its backend never runs
    _with_backend(monkeypatch, train_only)
    s = _train(tmp_path, "eval-fails")
    assert s["status"] == "completed" and s["compile"]["blocks"] == 0
    assert s["compile"]["fallback"].startswith("during evaluation: ") and "inference graph" in s["compile"]["fallback"]
    warned = _compile_warnings(tmp_path / "eval-fails")
    assert len(warned) == 1 and "during evaluation" in warned[0]
    assert s["eval"] == pytest.approx(eager["eval"])  # the eval ran again, eagerly, to the same figures
    assert s["param_digest"] == eager["param_digest"]
