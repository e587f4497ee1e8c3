"""Text matching for ``--explain``: normalise a pasted log, tokenise it, and rank documents with BM25.

A compact implementation instead of a dependency: BM25 is twenty lines, the libraries that offer it
(rank-bm25, scikit-learn) bring numpy or much more, and the tokeniser below is where the real work
is: it must throw away what differs between two pastes of the same error (paths, addresses, PIDs,
ranks, timestamps, hex, versions) and keep what names it (``ncclSystemError``, ``libcudart``,
``/dev/shm``). Word unigrams and bigrams plus a light suffix stemmer carry the wording; character
4-grams of the longer words catch spellings the stemmer misses.
"""

from __future__ import annotations

import math
import re
from collections import Counter

# Order matters: timestamps before times before plain numbers, paths before versions.
_NOISE = [
    (re.compile(r"\x1b\[[0-9;]*m"), " "),  # ANSI colours
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}([.,]\d+)?)?(Z|[+-]\d{2}:?\d{2})?"), " "),  # ISO timestamps
    (re.compile(r"\b[EWIFD]\d{4} \d{2}:\d{2}:\d{2}\.\d+"), " "),  # glog prefix: E0323 21:57:08.583
    (re.compile(r"\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d+ \d{2}:\d{2}:\d{2}\b"), " "),  # syslog
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}([.,]\d+)?\b"), " "),  # bare times
    (re.compile(r"\b[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b"), " "),  # UUIDs (GPU-..., MIG-...)
    (re.compile(r"\b\d{1,3}(\.\d{1,3}){3}([:<]\d+>?)?"), " ipaddr "),  # IPv4[:port] / ip<port>
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), " "),  # addresses
    (re.compile(r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b"), " "),  # hashes, long hex
    (re.compile(r"\b[pP][iI][dD][=: ]+\d+"), " pid "),  # pid=123, pid 123, PID: 123
    (re.compile(r"\[?\b[rR]ank ?\d+\]?:?"), " rank "),  # [rank3]:, [Rank 3], Rank 3
    (re.compile(r"\b(local_)?rank[=:] ?\d+"), " rank "),
    # File "/a/b/c/dataloader.py", line 521, in __next__  ->  dataloader.py
    (re.compile(r'File "(?:[^"]*[/\\])?([^"/\\]+)", line \d+(, in \S+)?'), r" \1 "),
    (re.compile(r"(?<![\w.])(?:[A-Za-z]:)?(?:[\w.~+@-]*[/\\])+([\w.+-]+)"), r" \1 "),  # paths -> basename
    (re.compile(r"\bv?\d+(\.\d+)+[a-z]?\d*\b"), " "),  # versions 2.7.8, 570.124.06, 12.1
]

STOP = frozenset("""a an and are as at be been but by can could do does for from has have if in into is it its
    of on or so such that the then there these this to was were which while will with you your we our i my me
    please see try using use may might""".split())

_WORD = re.compile(r"[a-z][a-z0-9_]*")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
CHARGRAM_WEIGHT = 0.25  # a shared 4-gram is weak evidence: a long word yields many of them
_SUFFIXES = ("ations", "ation", "ings", "ing", "ies", "ied", "ed", "es", "s")


def normalize(text: str) -> str:
    """The text with per-run noise (paths, addresses, PIDs, ranks, timestamps, hex, versions) removed."""
    for pattern, repl in _NOISE:
        text = pattern.sub(repl, text)
    return text


def stem(word: str) -> str:
    """A light suffix stripper: 'initialized', 'initializing', 'initialization' -> 'initializ'."""
    if len(word) > 5:
        for suf in _SUFFIXES:
            if word.endswith(suf) and len(word) - len(suf) >= 4:
                return word[: -len(suf)]
    return word


def _tokens(text: str) -> list[tuple[str, bool]]:
    """(stemmed word, is_part) pairs: camelCase and snake_case compounds also give their parts."""
    out: list[tuple[str, bool]] = []
    for raw in re.findall(r"[A-Za-z][A-Za-z0-9_]*", normalize(text)):
        low = raw.lower()
        if low in STOP or len(low) < 2:
            continue
        out.append((stem(low), False))  # the compound itself is the strongest term (ncclsystemerror)
        parts = [p.lower() for chunk in raw.split("_") for p in _CAMEL.findall(chunk)]
        parts = [p for p in parts if len(p) > 1 and not p.isdigit() and p not in STOP]
        if len(parts) > 1:
            out.extend((stem(p), True) for p in parts)
    return out


def words(text: str) -> list[str]:
    """Stemmed words of the normalised text, compounds followed by their parts."""
    return [w for w, _ in _tokens(text)]


def terms(text: str) -> list[str]:
    """Index terms: word unigrams, bigrams of adjacent words as written (not of a compound's parts),
    and character 4-grams (marked '#') of words of 7+ letters."""
    toks = _tokens(text)
    ws = [w for w, _ in toks]
    surface = [w for w, part in toks if not part]
    out = list(ws)
    out.extend(f"{a} {b}" for a, b in zip(surface, surface[1:]))
    for w in ws:
        if len(w) >= 7 and "_" not in w:
            out.extend(f"#{w[i:i + 4]}" for i in range(len(w) - 3))
    return out


# Text a library appends to every message of a kind: it names no cause, so it must never decide a match.
# Removed before matching; the OOM hint becomes the plain OOM words it implies (it is printed on OOM only).
# Each: (lowercase substrings one of which must be present, pattern, replacement).
_BOILERPLATE = [
    (("expandable_segments",),
     re.compile(r"If reserved but unallocated memory is large try setting\s+PYTORCH_CUDA_ALLOC_CONF=expandable_segments:"
                r"True to avoid\s+fragmentation\.?(\s*See documentation for Memory Management\s*(\(\S+\))?)?", re.I),
     " CUDA out of memory. "),
    (("max_split_size_mb",),
     re.compile(r"(?:(?:If reserved memory is >> )?a?llocated memory )?try setting\s+max_split_size_mb to avoid"
                r"\s+fragmentation\.?(\s*See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CON\w*)?", re.I),
     " CUDA out of memory. "),
    (("asynchronously reported", "cuda_launch_blocking", "torch_use_cuda_dsa"),
     re.compile(r"CUDA kernel errors might be asynchronously reported at some other API call(,?\s+so the\s+stacktrace"
                r" below might be incorrect)?\.?|For debugging consider passing CUDA_LAUNCH_BLOCKING=1\.?|Compile with"
                r" .?TORCH_USE_CUDA_DSA.? to enable device-side assertions\.?", re.I), " "),
    # NCCL's text for an error code is the same whatever the cause; the code's name (ncclSystemError) stays
    (("system call (", "invalid usage of nccl", "unexpected exit of a remote peer"),
     re.compile(r"System call \((e\.g\. socket, malloc|socket, malloc, munmap, etc)\) (or external library call )?"
                r"failed( or device error)?\.?|This usually reflects invalid usage of NCCL library\.?|It can be also"
                r" caused by unexpected exit of a remote peer(, you can check NCCL warnings for failure reason and see if"
                r" there is connection closure by a peer)?\.?", re.I), " "),
    (("nccl_debug=", "last error", "asynchronous nature", "data inconsistency"),
     re.compile(r"\(run with NCCL_DEBUG=(INFO|WARN) for details\)|\bLast error:|Due to the asynchronous nature of CUDA"
                r" kernels,\s+subsequent GPU operations might run on corrupted/incomplete data\.?|To avoid data"
                r" inconsistency, we are taking the entire process down\.?", re.I), " "),
    (("error_file", "childfailederror", "no_other_failures", "to enable traceback"),  # torchrun's ChildFailedError frame
     re.compile(r"traceback\s*:\s*To enable traceback see: \S+|error_file\s*:\s*\S+|<NO_OTHER_FAILURES>|^\s*[=-]{8,}\s*$"
                r"|^\s*(time|host|rank)\s+:.*$|^\s*Failures:\s*$|^\s*\[\d+\]:\s*$"
                r"|torch\.distributed\.elastic\.multiprocessing\.errors\.(?=ChildFailedError)", re.I | re.M), " "),
]


def strip_boilerplate(text: str) -> str:
    """The text without the sentences a library appends to every error of a kind (see _BOILERPLATE)."""
    lower = text.lower()
    for needs, pattern, repl in _BOILERPLATE:
        if any(n in lower for n in needs):  # a substring test first: most texts carry none of it
            text = pattern.sub(repl, text)
    return text


class BM25:
    """Okapi BM25 over pre-tokenised documents. Queries count each distinct term once, so a log that
    repeats a line 500 times does not outweigh the one line that names the error.

    ``without(docs)`` is the same index with some documents left out (their terms no longer count in
    the document frequencies either): evaluation leaves a source out without re-indexing the rest."""

    def __init__(self, docs: list[list[str]], k1: float = 1.2, b: float = 0.75):
        self.k1, self.b = k1, b
        self.tf = [Counter(d) for d in docs]
        self.len = [len(d) for d in docs]
        self.df: Counter = Counter()
        self.postings: dict[str, list[int]] = {}  # an inverted index: a query visits only the documents holding its terms
        for i, tf in enumerate(self.tf):
            self.df.update(tf.keys())
            for t in tf:
                self.postings.setdefault(t, []).append(i)
        self._set_up(frozenset(), self.df)

    def _set_up(self, out: frozenset[int], df: Counter) -> None:
        self.out, self._df = out, df
        self.n = len(self.tf) - len(out)
        kept = [size for i, size in enumerate(self.len) if i not in out]
        avg = sum(kept) / max(len(kept), 1)
        self.norm = [self.k1 * (1 - self.b + self.b * size / avg) if avg else self.k1 for size in self.len]
        self._idf: dict[str, float] = {}

    def without(self, docs) -> BM25:
        out = frozenset(docs)
        df = Counter()
        for i in out:
            df.update(self.tf[i].keys())
        view = object.__new__(BM25)
        view.__dict__.update(self.__dict__)
        view._set_up(out, self.df - df)
        return view

    def idf(self, term: str) -> float:
        """0 for a term no kept document holds."""
        got = self._idf.get(term)
        if got is None:
            f = self._df.get(term, 0)
            got = self._idf[term] = math.log(1 + (self.n - f + 0.5) / (f + 0.5)) if f else 0.0
        return got

    def scores(self, query: list[str]) -> list[tuple[float, list[str]]]:
        """(score, matched terms) for every document, in document order."""
        out: list[tuple[float, list[str]]] = [(0.0, []) for _ in self.tf]
        for i, score, hit in self._walk(query):
            out[i] = (score, hit)
        return out

    def weight(self, terms) -> float:
        """The summed idf of distinct terms (what a perfect match scores, about)."""
        return sum((CHARGRAM_WEIGHT if t[0] == "#" else 1.0) * self.idf(t) for t in set(terms))

    def top(self, query: list[str]) -> list[tuple[int, float]]:
        """(document index, score) of every document that shares a two-word phrase with the query."""
        return [(i, score) for i, score, hit in self._walk(query) if any(" " in t for t in hit)]

    def _walk(self, query: list[str]):
        acc: dict[int, float] = {}
        hits: dict[int, list[str]] = {}
        out, k1 = self.out, self.k1
        for t in set(query):
            docs = self.postings.get(t)
            if not docs:
                continue
            idf = (CHARGRAM_WEIGHT if t[0] == "#" else 1.0) * self.idf(t)
            for i in docs:
                if i in out:
                    continue
                f = self.tf[i][t]
                acc[i] = acc.get(i, 0.0) + idf * f * (k1 + 1) / (f + self.norm[i])
                hits.setdefault(i, []).append(t)
        return [(i, acc[i], hits[i]) for i in sorted(acc)]


def required_literals(pattern: str) -> list[str] | None:
    """For each top-level alternative of a regex, its longest literal run that any match must contain
    (lowercased, 3+ characters); None when some alternative has none. Searching 600 case-insensitive
    regexes through a long log is the slow part of --explain; a substring test skips most of them."""
    branches, depth, cls, cur, i = [], 0, False, [], 0
    while i < len(pattern):  # split at top-level '|'
        c = pattern[i]
        if c == "\\":
            cur.append(pattern[i:i + 2])
            i += 2
            continue
        if cls:
            cls = c != "]"
        elif c == "[":
            cls = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            branches.append("".join(cur))
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    branches.append("".join(cur))
    out = []
    for b in branches:
        best = _longest_literal(b)
        if len(best) < 3:
            return None
        out.append(best.lower())
    return out


_ESCAPED_LITERAL = set(".()[]{}*+?|^$\\/-'\"`<>:=! ")


def _longest_literal(branch: str) -> str:
    """The longest run of literal characters at depth 0 of a regex branch, none of them quantified."""
    runs, cur, depth, cls, i = [], "", 0, False, 0
    while i < len(branch):
        c = branch[i]
        nxt = branch[i + 2:i + 3] if c == "\\" else branch[i + 1:i + 2]
        if c == "\\":
            lit = branch[i + 1:i + 2]
            i += 2
            if depth == 0 and not cls and lit in _ESCAPED_LITERAL and nxt not in "?*{":
                cur += lit
                continue
            runs.append(cur)
            cur = ""
            continue
        i += 1
        if cls:
            cls = c != "]"
            continue
        if c in "([":
            depth += c == "("
            cls = c == "["
            runs.append(cur)
            cur = ""
        elif c == ")":
            depth -= 1
        elif c in ".^$*+?{}|":
            if c in "?*{" and cur:  # the quantifier makes the last character optional
                cur = cur[:-1]
            if c == "{" and "}" in branch[i:]:  # a counted quantifier {m,n}: its digits are not literal text
                i = branch.index("}", i) + 1
            runs.append(cur)
            cur = ""
        elif depth == 0:
            if nxt in ("?", "*", "{"):
                runs.append(cur)
                cur = ""
            else:
                cur += c
    runs.append(cur)
    return max(runs, key=len)
