"""--explain on a corpus of real error texts: top-1 accuracy, honest no-match, live-fact boost."""

from __future__ import annotations

import yaml
from doctor_fixtures import FIX, healthy

from rubin.doctor import explain, knowledge, registry

CORPUS = yaml.safe_load((FIX / "explain_corpus.yaml").read_text())


def top1(text, findings=None):
    m = explain.explain(text, findings)
    return m[0].entry.id if m else None


def test_knowledge_base_is_large_and_well_formed():
    entries = knowledge.entries()
    assert len(entries) >= 40
    check_ids = {c.id for c in registry.all_checks()}
    for e in entries:
        assert e.patterns and e.cause and e.fix and e.source, e.id
        assert set(e.checks) <= check_ids, (e.id, set(e.checks) - check_ids)
    categories = {e.category for e in entries}
    assert {"driver", "cuda_runtime", "torch_build", "memory", "nccl", "torchrun", "ddp", "amp", "cudnn",
            "xid_ecc", "container", "dataloader", "checkpoint"} <= categories


def test_corpus_top1_accuracy():
    wrong = [(c["expect"], top1(c["text"]), c["text"][:80]) for c in CORPUS if top1(c["text"]) != c["expect"]]
    accuracy = 1 - len(wrong) / len(CORPUS)
    print(f"explain top-1 accuracy: {accuracy:.3f} on {len(CORPUS)} texts")
    assert len(CORPUS) >= 60
    assert accuracy >= 0.95, wrong


def test_corpus_covers_most_entries():
    expected = {c["expect"] for c in CORPUS if c["expect"]}
    assert len(expected) >= 45


def test_no_match_is_said_honestly_with_what_to_collect():
    rep = explain.report("ValueError: could not convert string to float: 'abc'")
    assert rep["matched"] is False and rep["matches"] == []
    assert any("NCCL_DEBUG=INFO" in c for c in rep["collect"])


def test_live_facts_confirm_the_driver_cause():
    from test_doctor_checks import cpu_only, driver_gone

    text = "ImportError: libcuda.so.1: cannot open shared object file: No such file or directory"
    findings = registry.run_checks(driver_gone(healthy()))
    m = explain.explain(text, findings)
    assert m[0].entry.id == "libcuda_missing"
    assert any(f.check == "driver.not_loaded" for f in m[0].confirmed_by)
    plain = explain.explain(text, None)[0]
    assert m[0].score > plain.score and not plain.confirmed_by
    # CPU-only facts are info, not a problem: nothing to confirm
    assert not explain.explain(text, registry.run_checks(cpu_only(healthy())))[0].confirmed_by


def test_live_facts_rerank_between_close_causes():
    # "NCCL error ... unhandled system error" with a 64 MB /dev/shm here: shm confirms the generic entry's cause
    from test_doctor_checks import TRIGGERS

    f = TRIGGERS["system.shm_small"][0](healthy())
    m = explain.explain("ncclSystemError: System call (e.g. socket, malloc) or external library call failed", registry.run_checks(f))
    assert m[0].entry.id == "nccl_unhandled_system"
    assert [c.check for c in m[0].confirmed_by] == ["system.shm_small"]


def test_heldout_top1_accuracy():
    heldout = yaml.safe_load((FIX / "explain_heldout.yaml").read_text())
    hits = sum(top1(c["text"]) == c["expect"] for c in heldout)
    print(f"explain held-out top-1 accuracy: {hits / len(heldout):.3f} on {len(heldout)} texts")
    assert hits / len(heldout) >= 0.8
