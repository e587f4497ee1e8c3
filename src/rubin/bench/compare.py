"""``rubin compare``: baseline rules, peer outliers, environment diff and a speedup table.

Rules are SuperBench style (see ``rules_default.yaml``). A decision uses intervals, not samples:
pass when the NEW figure's whole 95% interval is on the good side of the limit set from the
baseline median; fail when it is on the bad side even of the limit set from the far end of the
baseline's interval (so noise in the baseline cannot fail a node); marginal otherwise. A metric
that a rule covers in the baseline but that is missing in the new file fails (SuperBench
``failure_check``). Verdicts: pass < marginal < fail; the overall verdict is the worst one.
"""

from __future__ import annotations

import fnmatch
from importlib import resources
from pathlib import Path
from statistics import median

from rubin.bench import metrics as M
from rubin.errors import UsageError, bad_value

SCHEMA_VERSION = 1
CRITERIA = ("max_below_pct", "max_above_pct", "within_pct")
ORDER = {"pass": 0, "marginal": 1, "fail": 2}


RULES_VERSION = 1


def load_rules(path: str | Path | None = None) -> dict:
    from rubin.errors import load_mapping, load_yaml_text

    if path is None:
        where = "default rules"
        doc = load_yaml_text(resources.files("rubin.bench").joinpath("rules_default.yaml").read_text(), where) or {}
    else:
        where = str(path)
        doc = load_mapping(path, "--rules file", "pass a YAML file like rubin/bench/rules_default.yaml")
    version = doc.get("version", RULES_VERSION)
    if version != RULES_VERSION or isinstance(version, bool):
        raise bad_value(f"{where}: version", version, f"this rubin reads rules version {RULES_VERSION}",
                        "write the rules for this version (see rubin/bench/rules_default.yaml) or upgrade rubin")
    unknown = sorted(set(doc) - {"version", "rules", "outliers", "env_ignore"})
    if unknown:
        from rubin.errors import did_you_mean

        raise UsageError(f"{where}: unknown key {unknown[0]!r}{did_you_mean(unknown[0], ['version', 'rules', 'outliers', 'env_ignore'])}; "
                         "keys allowed: version, rules, outliers, env_ignore")
    rules = doc.get("rules")
    if not isinstance(rules, list) or not rules:
        raise bad_value(f"{where}: rules", rules, "a non-empty list of {name, metrics, <criterion>}")
    for i, r in enumerate(rules):
        _no_unknown_keys(r, RULE_KEYS, f"{where}: rules[{i}]")
        crit = [c for c in CRITERIA if c in r] if isinstance(r, dict) else []
        if not isinstance(r, dict) or not r.get("metrics") or len(crit) != 1:
            raise bad_value(f"{where}: rules[{i}]", r, f"name, metrics (globs) and exactly one of {', '.join(CRITERIA)}")
        value = r[crit[0]]
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1e6:
            raise bad_value(f"{where}: rules[{i}].{crit[0]}", value, "a percentage >= 0")
        r.setdefault("name", f"rule {i}")
    _no_unknown_keys(doc.get("outliers"), OUTLIER_KEYS, f"{where}: outliers")
    doc.setdefault("outliers", {})
    doc.setdefault("env_ignore", [])
    return doc


RULE_KEYS = ("name", "metrics", *CRITERIA)
OUTLIER_KEYS = ("max_below_peer_median_pct", "metrics")


def _no_unknown_keys(entry, allowed: tuple, where: str) -> None:
    """A misspelt key (``within_pc``) would silently drop a criterion: refuse it with a did-you-mean."""
    from rubin.errors import did_you_mean

    unknown = sorted(set(entry) - set(allowed)) if isinstance(entry, dict) else []
    if unknown:
        raise UsageError(f"{where}: unknown key {str(unknown[0])!r}{did_you_mean(unknown[0], allowed)}; "
                         f"keys allowed: {', '.join(allowed)}")


def _rule_for(key: str, rules: list[dict]) -> dict | None:
    for r in rules:
        if any(fnmatch.fnmatchcase(key, pat) for pat in r["metrics"]):
            return r
    return None


def judge(base: dict, new: dict | None, rule: dict) -> dict:
    """One metric: baseline figure, new figure (or None) and a rule -> verdict row."""
    b = base["median"]
    crit = next(c for c in CRITERIA if c in rule)
    pct = float(rule[crit]) / 100.0
    row = {"rule": rule["name"], "criterion": f"{crit}={rule[crit]}", "baseline": b, "new": None, "ci95": None, "change_pct": None}
    if new is None or new.get("median") is None:
        return {**row, "verdict": "fail", "reason": "missing in the new results"}
    lo, hi = new["ci95"]
    row.update(new=new["median"], ci95=[lo, hi], change_pct=100.0 * (new["median"] - b) / b if b else None)
    b_lo, b_hi = (base.get("ci95") or [b, b])
    b_lo, b_hi = (b if b_lo is None else b_lo), (b if b_hi is None else b_hi)
    checks = []
    # Pass: the new interval clears the limit set from the baseline median. Fail: it misses the
    # limit even from the baseline interval's far end, so a noisy baseline cannot cause a failure.
    if crit in ("max_below_pct", "within_pct"):
        checks.append("pass" if lo >= b * (1 - pct) else "fail" if hi < b_lo * (1 - pct) else "marginal")
    if crit in ("max_above_pct", "within_pct"):
        checks.append("pass" if hi <= b * (1 + pct) else "fail" if lo > b_hi * (1 + pct) else "marginal")
    verdict = max(checks, key=ORDER.get)
    reason = {"pass": "within the limit", "fail": "the whole 95% interval is past the limit, baseline noise included",
              "marginal": "the 95% interval straddles the limit: rerun with more trials"}[verdict]
    return {**row, "verdict": verdict, "reason": reason}


def rule_verdicts(base_doc: dict, new_doc: dict, rules: list[dict]) -> list[dict]:
    bm, nm = M.flatten(base_doc), M.flatten(new_doc)
    rows = []
    for key, m in bm.items():
        rule = _rule_for(key, rules)
        if rule is None:
            continue
        rows.append({"metric": key, **judge(m["figure"], (nm.get(key) or {}).get("figure"), rule)})
    return rows


def outliers(doc: dict, cfg: dict) -> list[dict]:
    """GPUs more than X% below the median of their node peers, inside one results file."""
    pct = float(cfg.get("max_below_peer_median_pct", 10)) / 100.0
    pats = cfg.get("metrics") or ["matmul/*/tflops", "membw/*/gbps"]
    groups: dict[str, list[tuple[str, float]]] = {}
    for key, m in M.flatten(doc).items():
        if m["device"] and any(fnmatch.fnmatchcase(key, p) for p in pats):
            groups.setdefault(m["group"], []).append((m["device"], m["figure"]["median"]))
    found = []
    for group, vals in groups.items():
        if len(vals) < 2:
            continue
        for dev, v in vals:
            peers = median(x for d, x in vals if d != dev)
            if peers and v < peers * (1 - pct):
                found.append({"metric": group, "device": dev, "value": v, "peer_median": peers,
                              "below_pct": 100.0 * (peers - v) / peers, "verdict": "fail"})
    return found


def _flat(d, prefix=""):
    out = {}
    for k, v in (d or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def env_diff(base_env: dict, new_env: dict, ignore: list[str]) -> list[dict]:
    a, b = _flat(base_env), _flat(new_env)
    rows = []
    for key in sorted(set(a) | set(b)):
        if any(fnmatch.fnmatchcase(key, pat) for pat in ignore):
            continue
        if a.get(key) != b.get(key):
            rows.append({"field": key, "baseline": a.get(key), "new": b.get(key)})
    return rows


def speedups(base_doc: dict, new_doc: dict) -> list[dict]:
    """New against old per workload: > 1 means the new platform is faster."""
    hb, hn = M.headline(base_doc), M.headline(new_doc)
    rows = []
    for name, (b, better) in hb.items():
        if name in hn and b and hn[name][0]:
            n = hn[name][0]
            rows.append({"workload": name, "baseline": b, "new": n, "speedup": n / b if better == "higher" else b / n})
    return rows


def _weak(doc: dict | None) -> tuple[set, set]:
    """(noisy metric keys, contended suites) recorded in a results file's quality section."""
    q = (doc or {}).get("quality") or {}
    return ({n.get("metric") for n in q.get("noisy") or [] if isinstance(n, dict)}, set(q.get("contended") or []))


def mark_weak(rows: list[dict], base_doc: dict | None, new_doc: dict) -> None:
    """A verdict on a noisy figure or a benchmark run under load is marked, so nobody acts on it unawares."""
    for doc, side in ((base_doc, "baseline"), (new_doc, "new")):
        noisy, contended = _weak(doc)
        for r in rows:
            if r["metric"] in noisy:
                r.setdefault("caveats", []).append(f"{side} figure is noisy")
            if r["metric"].split("/", 1)[0] in contended:
                r.setdefault("caveats", []).append(f"{side} measured under load")


def compare(base_doc: dict | None, new_doc: dict, rules_doc: dict, *, strict: bool = False) -> dict:
    from rubin.bench.load import caveats

    rows = rule_verdicts(base_doc, new_doc, rules_doc["rules"]) if base_doc else []
    mark_weak(rows, base_doc, new_doc)
    peer = outliers(new_doc, rules_doc.get("outliers") or {})
    worst = max([r["verdict"] for r in rows] + [o["verdict"] for o in peer] + ["pass"], key=ORDER.get)
    if strict and worst == "marginal":
        worst = "fail"
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ORDER}
    return {
        "schema_version": SCHEMA_VERSION, "kind": "rubin.compare",
        "baseline": _ident(base_doc) if base_doc else None, "new": _ident(new_doc),
        "verdict": worst, "counts": counts, "metrics": rows, "outliers": peer,
        "caveats": (caveats(base_doc, "baseline") if base_doc else []) + caveats(new_doc, "new"),
        "weak_verdicts": sum(bool(r.get("caveats")) for r in rows),
        "env_diff": env_diff(base_doc["env"], new_doc["env"], rules_doc.get("env_ignore", [])) if base_doc else [],
        "speedup": speedups(base_doc, new_doc) if base_doc else [],
    }


def _ident(doc: dict) -> dict:
    return {"device": doc["device"]["name"], "count": doc["device"]["count"], "spec": (doc.get("spec") or {}).get("key"),
            "created": doc["created"], "preset": doc["preset"], "path": doc.get("_path")}
