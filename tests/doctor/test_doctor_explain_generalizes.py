"""--explain beyond its own examples: the real-error corpus evaluated by source, library boilerplate that
never decides a match, the facts read from the message (OOM numbers, loss scale, state-dict keys), and
whole logs (a torchrun log of 8 ranks, a Slurm .err, dmesg) with the root cause, its rank and a second
unrelated problem."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from doctor_fixtures import FIX
from utils import invoke

from rubin.doctor import corpus, deciders, explain, knowledge, logscan, textmatch

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"

# The issue's own example: an ordinary OOM whose message ends in the expandable_segments hint.
ORDINARY_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of"
                " 79.11 GiB of which 6.50 MiB is free. Including non-PyTorch memory, this process has 79.10 GiB memory in"
                " use. Of the allocated memory 78.50 GiB is allocated by PyTorch, and 11.60 MiB is reserved by PyTorch but"
                " unallocated. If reserved but unallocated memory is large try setting"
                " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory"
                " Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
FRAGMENTED_OOM = ORDINARY_OOM.replace("78.50 GiB is allocated", "61.05 GiB is allocated").replace(
    "11.60 MiB is reserved", "16.34 GiB is reserved")


def test_corpus_is_large_from_many_sources_and_well_formed():
    rows = corpus.load()
    assert corpus.problems() == ()  # every row parses and every cause is a knowledge id (or mapped by aliases.yaml)
    ids = {e.id for e in knowledge.entries()}
    assert len(rows) >= 500 and len({r.source for r in rows}) >= 25
    assert sum(r.cause is None for r in rows) >= 40
    for r in rows:
        assert r.url.startswith("https://") and r.resolution.strip() and r.text.strip(), r.url
        assert r.cause is None or r.cause in ids
    assert len({" ".join(r.text.split()) for r in rows}) == len(rows)  # a text quoted twice counts once


def test_a_row_with_an_unknown_cause_is_named_not_loaded():
    good = '{"text": "x", "source": "s", "url": "https://u", "cause": null, "resolution": "r"}'
    bad = '{"text": "x", "source": "s", "url": "https://u", "cause": "new:nobody_mapped_this", "resolution": "r"}'
    rows, problems = corpus.parse("t.jsonl", [good, bad, "{not json"], {"cuda_oom"})
    assert [r.cause for r in rows] == [None]
    assert problems[0].startswith("corpus/t.jsonl line 2: cause 'new:nobody_mapped_this'") and "line 3" in problems[1]


@pytest.fixture(scope="module")
def loso():
    sys.path.insert(0, str(BENCH))
    try:
        import explain_loso
    finally:
        sys.path.remove(str(BENCH))
    return explain_loso.loso()


def _rates(loso):
    return loso.top1 / loso.n, loso.top3 / loso.n, loso.false_confident / loso.out_of_scope


@pytest.mark.slow
def test_leave_one_source_out_holds_its_measured_level(loso):
    # the level reached on the committed corpus (96.1% / 98.1% / 0%): a regression below it fails here
    top1, top3, false_confident = _rates(loso)
    assert loso.sources >= 25 and loso.n >= 450
    assert top1 >= 0.955 and top3 >= 0.978 and false_confident <= 0.05, (top1, top3, false_confident, loso.misses[:20])


@pytest.mark.slow
def test_leave_one_source_out_meets_the_issue_targets(loso):
    top1, top3, false_confident = _rates(loso)
    assert top1 >= 0.95 and top3 >= 0.98 and false_confident <= 0.05, (top1, top3, false_confident)


def test_a_left_out_source_teaches_nothing():
    rows = [r for r in corpus.load() if r.cause is not None][:40]
    whole = corpus.Examples(rows)
    source = rows[0].source
    without = whole.without(source)
    query = textmatch.terms(rows[0].text)
    seen = {without.examples[i].source for i, _ in without.bm25.top(query)}
    assert source not in seen
    assert all(without.bm25.idf(t) == corpus.Examples([r for r in rows if r.source != source]).bm25.idf(t) for t in query)


def test_the_oom_hint_never_decides_the_numbers_do():
    m = explain.explain(ORDINARY_OOM)
    assert m[0].entry.id == "cuda_oom" and m[0].confidence >= 0.8
    assert "does not fit" in m[0].fact and "0.01%" in m[0].fact
    assert all(x.confidence < 0.05 for x in m if x.entry.id == "cuda_oom_fragmentation")
    f = explain.explain(FRAGMENTED_OOM)
    assert f[0].entry.id == "cuda_oom_fragmentation" and "in pieces" in f[0].fact
    # the hint alone, pasted without numbers, is an OOM (it is printed on every one), not fragmentation
    assert explain.explain("If reserved but unallocated memory is large try setting "
                           "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")[0].entry.id == "cuda_oom"


def test_numbers_that_cannot_all_be_true_decide_nothing():
    impossible = ("CUDA out of memory. Tried to allocate 11.47 GiB (GPU 0; 11.99 GiB total capacity; 11.80 GiB already "
                  "allocated; 0 bytes free; 23.34 GiB reserved in total by PyTorch)")
    assert deciders.oom(impossible) == {}
    assert explain.explain(impossible)[0].entry.id == "cuda_oom"


def test_library_suffixes_are_stripped_and_do_not_pull_the_match():
    suffix = ("\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might "
              "be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1.\nCompile with `TORCH_USE_CUDA_DSA` to "
              "enable device-side assertions.")
    stripped = textmatch.strip_boilerplate("RuntimeError: CUDA error: an illegal memory access was encountered" + suffix)
    assert "device-side" not in stripped and "CUDA_LAUNCH_BLOCKING" not in stripped
    assert explain.explain("RuntimeError: CUDA error: an illegal memory access was encountered" + suffix)[0].entry.id == \
        "illegal_memory_access"
    nccl = textmatch.strip_boilerplate("ncclSystemError: System call (e.g. socket, malloc) or external library call failed "
                                       "or device error. \nLast error:\nError while creating shared memory segment")
    assert "socket" not in nccl and "Last error" not in nccl and "ncclSystemError" in nccl


def test_facts_read_from_the_message():
    low = deciders.loss_scale("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 2, reducing to 1")
    high = deciders.loss_scale("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768")
    assert "fell to 1" in low["fp16_loss_scale"].fact and "harmless" in high["fp16_loss_scale"].fact
    head = deciders.state_dict("size mismatch for fc.weight: copying a param with shape torch.Size([1000, 2048]) from "
                               "checkpoint, the shape in current model is torch.Size([10, 2048]).")
    assert "only the head differs" in head["ckpt_size_mismatch"].fact
    prefix = deciders.state_dict('Missing key(s) in state_dict: "conv1.weight".\nUnexpected key(s) in state_dict: '
                                 '"module.conv1.weight".')
    assert prefix["ckpt_module_prefix"].factor > 1 > prefix["ckpt_missing_keys"].factor


def test_facts_that_split_entries_sharing_one_message():
    gres = deciders.slurm("sbatch --gres=gpu:teslap100:1 job.sh\nsbatch: error: Batch job submission failed: "
                          "Requested node configuration is not available")
    plain = deciders.slurm("sbatch -N 64 job.sh\nsbatch: error: Requested node configuration is not available")
    assert gres["slurm_gres"].bonus > 0 and gres["slurm_node_config"].factor < 1 and "--gres" in gres["slurm_gres"].fact
    assert plain["slurm_node_config"].bonus > 0 and plain["slurm_gres"].factor < 1
    assert deciders.slurm("Unable to allocate resources: --gres=gpu:2") == {}
    ddp = ('  File "/x/torch/nn/parallel/distributed.py", line 298, in __init__\n    self._sync_params_and_buffers()\n'
           "RuntimeError: Tensors must be CUDA and dense")
    assert explain.explain(ddp)[0].entry.id == "ddp_module_on_cpu"
    assert explain.explain("dist.all_reduce(t)\nRuntimeError: Tensors must be CUDA and dense")[0].entry.id == "nccl_cpu_tensor"
    bn = deciders.state_dict('Error(s) in loading state_dict for DataParallel:\n\tUnexpected key(s) in state_dict: '
                             '"module.bn1.num_batches_tracked", "module.layer1.0.bn1.num_batches_tracked"')
    assert bn["ckpt_missing_keys"].bonus > 0 and bn["ckpt_module_prefix"].factor < 1 and "2 listed" in bn["ckpt_missing_keys"].fact
    mixed = deciders.state_dict('Unexpected key(s) in state_dict: "module.bn1.num_batches_tracked", "module.fc.weight"')
    assert "ckpt_missing_keys" not in mixed or mixed["ckpt_missing_keys"].bonus == 0


def _examples(*labelled: tuple[str, str | None, str]) -> corpus.Examples:
    return corpus.Examples([corpus.Example(text, source, f"https://x/{i}", cause, "r")
                            for i, (text, cause, source) in enumerate(labelled)])


WRAPPED = "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:825, unhandled system error, NCCL version 2.7.8"


def test_a_wrapper_message_puts_its_usual_confirmed_cause_first_as_a_weak_candidate():
    shm = [(WRAPPED + f" in container {i}", "nccl_shm", f"repo{i}") for i in range(3)]
    learned = _examples(*shm, (WRAPPED + " two nodes", "nccl_socket", "repo8"),
                        (WRAPPED + " eth0", "nccl_socket", "repo9"), ("unrelated", "nccl_shm", "repo7"))
    m = explain.explain(WRAPPED, examples=learned, top=4)
    assert [x.entry.id for x in m[:3]] == ["nccl_shm", "nccl_unhandled_system", "nccl_socket"]
    assert m[0].evidence == "prior" and "3 of 5 confirmed cases" in m[0].fact and m[0].confidence < explain.WEAK
    rep = explain.report(WRAPPED)
    assert rep["weak"] and any("wrapper message" in d["why_unsure"] for d in rep["decide"])
    # no majority, too few cases, or a left-out source: the wrapper stays first
    assert explain.explain(WRAPPED, examples=_examples(*shm[:2], *[(WRAPPED + f" {i}", "nccl_socket", f"s{i}")
                                                                   for i in range(2)]))[0].entry.id == "nccl_unhandled_system"
    assert explain.explain(WRAPPED, examples=_examples(*shm[:2]))[0].entry.id == "nccl_unhandled_system"
    two_sources = _examples(*[(WRAPPED + f" {i}", "nccl_shm", "one") for i in range(3)], (WRAPPED, "nccl_socket", "two"))
    assert explain.explain(WRAPPED, examples=two_sources)[0].entry.id == "nccl_shm"
    assert explain.explain(WRAPPED, examples=two_sources.without("one"))[0].entry.id == "nccl_unhandled_system"


def test_a_context_entry_stays_a_candidate_without_its_context():
    text = "RuntimeError: cuda runtime error (101) : invalid device ordinal"
    ids = [m.entry.id for m in explain.explain(text)]
    assert ids[0] == "invalid_device_ordinal" and "mig_device_ordinal" in ids
    assert explain.explain(text + "\nGPU 0: NVIDIA A100 (MIG 3g.40gb Device 1)")[0].entry.id == "mig_device_ordinal"


def test_cli_prints_cause_fix_and_the_deciding_fact():
    r = invoke(["doctor", "--explain", ORDINARY_OOM, "--no-facts"])
    assert r.exit_code == 0
    assert "1. CUDA out of memory" in r.stdout and "deciding fact:" in r.stdout and "fix: rubin plan memory" in r.stdout


def test_out_of_scope_text_is_weak_with_why_each_candidate_is_not_sure():
    rep = explain.report("TypeError: forward() got an unexpected keyword argument 'position_ids'")
    assert not rep["matches"] or (rep["weak"] and all(d["why_unsure"] for d in rep["decide"]))


def test_torchrun_log_names_the_buried_first_error_and_its_rank(monkeypatch):
    text = (FIX / "explain_torchrun_8ranks.log").read_text()
    assert text.count("\n") == 2000 and logscan.is_log(text)
    rep = logscan.report(text)
    root = rep["root"]
    assert (root["id"], root["ranks"]) == ("cuda_oom", [5])  # torchrun's own 'first observed failure' says rank 0
    timeouts = [p for p in rep["problems"] if p["id"] == "nccl_timeout"]
    assert timeouts and timeouts[0]["secondary"] and sorted(timeouts[0]["ranks"]) == [0, 1, 2, 3, 4, 6, 7]
    assert root["line"] < timeouts[0]["line"] and rep["two_problems"] is False
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    out = invoke(["doctor", "--explain", "-", "--no-facts"]).stdout
    assert "Root cause: CUDA out of memory" in out and "rank 5" in out and "unrelated" not in out


def test_slurm_err_says_two_unrelated_problems():
    rep = logscan.report((FIX / "explain_slurm.err").read_text())
    assert (rep["root"]["id"], rep["root"]["ranks"]) == ("cuda_oom", [2])
    assert [(p["id"], p["ranks"]) for p in rep["unrelated"]] == [("dataloader_shm", [6])] and rep["two_problems"]


def test_dmesg_names_the_gpu_that_fell_off_the_bus():
    rep = logscan.report((FIX / "explain_dmesg.txt").read_text())
    assert rep["root"]["id"] == "xid_79" and rep["root"]["gpus"] == ["0000:3b:00"]


def test_one_problem_on_many_ranks_is_one_problem():
    lines = [f"[rank{r}]:RuntimeError: CUDA error: an illegal memory access was encountered" for r in range(4)] * 12
    rep = logscan.report("\n".join(lines))
    assert [(p["id"], sorted(p["ranks"])) for p in rep["problems"]] == [("illegal_memory_access", [0, 1, 2, 3])]
