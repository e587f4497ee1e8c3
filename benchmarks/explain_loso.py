"""Score ``rubin doctor --explain`` leaving one source out at a time: the figure that predicts unseen errors.

    python benchmarks/explain_loso.py              # top-1, top-3, false-confident rate, per family
    python benchmarks/explain_loso.py --misses     # and every text it gets wrong

For every source (a repository or site) of the corpus in src/rubin/doctor/data/corpus/, the engine learns
from the texts of all other sources only, then explains that source's texts. Top-1 and top-3 count over all
folds; texts whose cause is null (out of rubin's scope) count as false-confident when --explain answers
them with a confident (not weak) match. Splitting by thread would leave near-copies of one project's
errors on both sides; splitting by source does not.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class Result:
    n: int = 0
    top1: int = 0
    top3: int = 0
    out_of_scope: int = 0
    false_confident: int = 0
    families: dict = field(default_factory=lambda: defaultdict(lambda: [0, 0, 0]))  # category -> [n, top1, top3]
    misses: list = field(default_factory=list)  # (source, expected, got, url)
    sources: int = 0


def loso(rows=None) -> Result:
    from rubin.doctor import corpus, explain, knowledge

    rows = corpus.load() if rows is None else rows
    category = {e.id: e.category for e in knowledge.entries()}
    everything = corpus.Examples(rows)
    by_source = defaultdict(list)
    for i, r in enumerate(rows):
        by_source[r.source].append(i)
    res = Result(sources=len(by_source))
    for source, held in by_source.items():
        learned = everything.without(source)  # the fold learns nothing from this source
        for i in held:
            r = rows[i]
            matches = explain.explain(r.text, None, top=3, examples=learned)
            ids = [m.entry.id for m in matches]
            if r.cause is None:
                res.out_of_scope += 1
                confident = bool(matches) and matches[0].confidence >= explain.WEAK
                res.false_confident += confident
                if confident:
                    res.misses.append((source, None, ids, r.url))
                continue
            fam = res.families[category[r.cause]]
            hit1, hit3 = bool(ids) and ids[0] == r.cause, r.cause in ids
            res.n += 1
            res.top1 += hit1
            res.top3 += hit3
            fam[0] += 1
            fam[1] += hit1
            fam[2] += hit3
            if not hit1:
                res.misses.append((source, r.cause, ids, r.url))
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--misses", action="store_true", help="list every text whose top-1 is wrong")
    args = p.parse_args(argv)
    from rubin.doctor import corpus

    t0 = time.perf_counter()
    rows = corpus.load()
    for problem in corpus.problems():
        print("skipped:", problem)
    res = loso(rows)
    print(f"corpus: {len(rows)} texts from {res.sources} sources ({res.n} in scope, {res.out_of_scope} out of scope)")
    print(f"leave-one-source-out: top-1 {res.top1 / max(res.n, 1):.1%}  top-3 {res.top3 / max(res.n, 1):.1%}  "
          f"false-confident {res.false_confident}/{res.out_of_scope} = {res.false_confident / max(res.out_of_scope, 1):.1%}")
    print("\n| family | texts | top-1 | top-3 |\n|---|---|---|---|")
    for fam, (n, t1, t3) in sorted(res.families.items(), key=lambda kv: -kv[1][0]):
        print(f"| {fam} | {n} | {t1 / n:.0%} | {t3 / n:.0%} |")
    if args.misses:
        for source, expect, got, url in res.misses:
            print(f"  {source:<36} expected {expect!s:<28} got {got}  {url}")
    print(f"({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
