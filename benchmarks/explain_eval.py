"""Score ``rubin doctor --explain`` on real error texts: top-1 and top-3 accuracy per split.

    python benchmarks/explain_eval.py                 # train and dev, plus the entry count
    python benchmarks/explain_eval.py --split train --misses   # tuning: what train gets wrong

The texts (benchmarks/data/explain/{train,dev}.yaml) were pasted from public issue threads, each with
the cause the thread confirmed. They are split by thread with a fixed hash rule, checked here, so a
thread never sits on both sides. Tune on train; dev is only scored (``--misses`` refuses dev).
Runs from a fresh clone: ``pip install -e .`` then this script; no facts from this machine are used.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import yaml

DATA = Path(__file__).resolve().parent / "data" / "explain"
DEV_BUCKETS = 3  # of 10: sha256(url)[:8] as an integer, mod 10, below this is dev


def split_of(url: str) -> str:
    return "dev" if int(hashlib.sha256(url.encode()).hexdigest()[:8], 16) % 10 < DEV_BUCKETS else "train"


def load(split: str) -> list[dict]:
    rows = yaml.safe_load((DATA / f"{split}.yaml").read_text(encoding="utf-8"))
    wrong = [r["url"] for r in rows if split_of(r["url"]) != split]
    if wrong:
        sys.exit(f"{split}.yaml holds {len(wrong)} text(s) whose thread belongs to the other split, e.g. {wrong[0]}")
    return rows


def score(rows: list[dict]) -> tuple[float, float, list[tuple[str, list[str], str]]]:
    from rubin.doctor import explain

    top1 = top3 = 0
    misses = []
    for r in rows:
        ids = [m.entry.id for m in explain.explain(r["text"], None, top=3)]
        top1 += bool(ids) and ids[0] == r["expect"]
        top3 += r["expect"] in ids
        if not ids or ids[0] != r["expect"]:
            misses.append((r["expect"], ids, r["url"]))
    return top1 / len(rows), top3 / len(rows), misses


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--split", choices=["train", "dev", "both"], default="both")
    p.add_argument("--misses", action="store_true", help="list the texts whose top-1 is wrong (train only)")
    args = p.parse_args(argv)
    if args.misses and args.split != "train":
        p.error("--misses is for tuning and only reads train: add --split train")
    from rubin.doctor import knowledge

    t0 = time.perf_counter()
    print(f"knowledge base: {len(knowledge.entries())} entries, "
          f"{len({e.category for e in knowledge.entries()})} categories")
    train_urls = {r["url"] for r in load("train")}
    dev_urls = {r["url"] for r in load("dev")}
    assert not train_urls & dev_urls, "a thread is in both splits"
    for split in (["train", "dev"] if args.split == "both" else [args.split]):
        rows = load(split)
        t1, t3, misses = score(rows)
        print(f"{split:<5} n={len(rows):<4} top-1 {t1:6.1%}  top-3 {t3:6.1%}  "
              f"({len({r['expect'] for r in rows})} causes, {len({r['url'] for r in rows})} threads)")
        if args.misses:
            for expect, got, url in misses:
                print(f"  expected {expect:<28} got {got}  {url}")
    print(f"({time.perf_counter() - t0:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
