"""``verify(baseline_dirs, new_dirs)``: choose the method, run the checks, give one verdict."""

from __future__ import annotations

import math

from rubin.errors import UsageError
from rubin.verify import checks, stats
from rubin.verify.inputs import PLACE_KEYS, check_same_workload, config_diff, config_hash, load_side
from rubin.verify.rules import Rules, load_rules

SCHEMA_VERSION = 1
KIND = "rubin.verify.result"
METHODS = ("auto", "exact", "curve", "statistical")
ENV_FIELDS = (("gpu.names", "GPU"), ("gpu.count", "GPU count"), ("gpu.driver_version", "driver"),
              ("gpu.cuda_driver_version", "CUDA driver"), ("torch.version", "torch"), ("torch.cuda", "torch CUDA"),
              ("torch.nccl", "NCCL"), ("torch.cudnn", "cuDNN"), ("python.version", "python"), ("host.cpu_model", "CPU"),
              ("host.os", "OS"), ("rubin.version", "rubin"))


def _exact_blockers(a, b) -> list[str]:
    why = []
    ha, hb = config_hash(a.config), config_hash(b.config)
    if ha != hb:
        k, x, y = config_diff(a.config, b.config)[0]
        why.append(f"configs differ ({k}: {x!r} -> {y!r})")
    if not (a.config.get("run.deterministic") and b.config.get("run.deterministic")):
        why.append("run.deterministic is not true on both sides")
    if a.world_size != b.world_size:
        why.append(f"world size differs ({a.world_size} -> {b.world_size})")
    return why


def choose(base, new, requested: str) -> tuple[str, str]:
    nb, nn = len(base), len(new)
    if requested == "exact" or (requested == "auto" and nb == 1 and nn == 1):
        blockers = _exact_blockers(base[0], new[0]) if nb == 1 and nn == 1 else [f"it takes one run a side, got {nb} and {nn}"]
        if not blockers:
            return "exact", f"same config hash {config_hash(base[0].config)}, deterministic, world size {base[0].world_size} on both sides"
        if requested == "exact":
            raise UsageError(f"--method exact cannot be used: {'; '.join(blockers)}; use --method curve or statistical")
        return "curve", f"one run a side; exact is not possible: {'; '.join(blockers)}"
    if requested == "statistical" or (requested == "auto" and nb >= 3):
        if nb < 3 or nn < 1:
            raise UsageError(f"too few seeds for --method statistical: {nb} baseline and {nn} new run(s), it needs at least 3 "
                             f"baseline seeds and 1 new (3 recommended); train more seeds with --set run.seed=N")
        return "statistical", f"{nb} baseline seeds and {nn} new" + ("" if nn >= 3 else " (3 new seeds recommended)")
    return "curve", (f"{nb} baseline and {nn} new run(s): too few baseline seeds for statistical (3+), so the seed-mean "
                     f"loss curves are compared")


def _figure(xs: list[float]) -> dict | None:
    xs = [x for x in xs if isinstance(x, (int, float)) and math.isfinite(x)]
    if not xs:
        return None
    return {"median": sorted(xs)[len(xs) // 2] if len(xs) % 2 else stats.mean(sorted(xs)[len(xs) // 2 - 1:len(xs) // 2 + 1]),
            "mean": stats.mean(xs), "std": stats.std(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def _side(runs) -> dict:
    share = {}
    for k in ("data_s", "compute_s", "ckpt_s"):
        share[k] = _figure([(r.summary.get("time_share") or {}).get(k) for r in runs])
    s0 = runs[0]
    return {"runs": [str(r.path) for r in runs], "seeds": [r.seed for r in runs], "n": len(runs),
            "samples_per_s": _figure([r.summary.get("samples_per_s") for r in runs]),
            "mfu": _figure([r.summary.get("mfu") for r in runs]),
            "time_share": share,
            "precision": s0.summary.get("precision", s0.config.get("precision")), "world_size": s0.world_size,
            "strategy": s0.summary.get("strategy", s0.config.get("distributed.strategy")), "global_batch": s0.global_batch,
            "device": s0.summary.get("device"), "config_hash": config_hash(s0.config, ignore=PLACE_KEYS + ("run.seed",))}


def _get(d: dict, dotted: str):
    for part in dotted.split("."):
        if not isinstance(d, dict):
            return None
        d = d.get(part)
    return d


def env_diff(a: dict, b: dict) -> list[dict]:
    return [{"field": label, "baseline": _get(a, key), "new": _get(b, key)}
            for key, label in ENV_FIELDS if _get(a, key) != _get(b, key)]


def verify(baseline, new, *, rules: Rules | None = None, method: str = "auto") -> dict:
    if method not in METHODS:
        from rubin.errors import bad_choice

        raise bad_choice("--method", method, METHODS)
    rules = rules or load_rules()
    base_runs, new_runs = load_side(baseline, "baseline"), load_side(new, "new")
    check_same_workload(base_runs, new_runs)
    chosen, why = choose(base_runs, new_runs, method)
    result = {"schema_version": SCHEMA_VERSION, "kind": KIND, "method": chosen, "method_reason": why,
              "rules": rules.model_dump(), "baseline": _side(base_runs), "new": _side(new_runs), "checks": [], "figure": None}
    cs = result["checks"]
    if chosen == "exact":
        cs.append(checks.exact(base_runs[0], new_runs[0]))
    elif chosen == "curve":
        cs.append(checks.curve(base_runs, new_runs, rules))
    if chosen != "exact":
        env_check, fig = checks.envelope(base_runs, new_runs, rules)
        result["figure"] = fig
        if chosen == "statistical":
            cs += [env_check, *checks.t_tests(base_runs, new_runs, rules)]
    cs += checks.events(new_runs, rules)
    b, n = result["baseline"]["samples_per_s"], result["new"]["samples_per_s"]
    speedup = n["median"] / b["median"] if b and n and b["median"] else None
    result["speedup"] = speedup
    if rules.min_speedup is not None:
        if speedup is None:
            cs.append(checks.check("speedup", "min_speedup", "inconclusive", "samples/s missing from a summary.json"))
        else:
            ok = speedup >= rules.min_speedup
            cs.append(checks.check("speedup", "min_speedup", "pass" if ok else "fail",
                                   f"new runs {speedup:.2f}x the baseline samples/s ({checks.fmt(n['median'])} against "
                                   f"{checks.fmt(b['median'])}); required {rules.min_speedup:g}x", speedup=speedup))
    diff = config_diff(base_runs[0].config, new_runs[0].config, ignore=PLACE_KEYS + ("run.seed",))
    if base_runs[0].world_size != new_runs[0].world_size:
        diff.insert(0, ("world_size", base_runs[0].world_size, new_runs[0].world_size))
    result["config_diff"] = [{"key": k, "baseline": a, "new": c} for k, a, c in diff]
    result["env_diff"] = env_diff(base_runs[0].env, new_runs[0].env)
    result["problems"] = [p for r in base_runs + new_runs for p in r.problems]
    verdicts = [c["verdict"] for c in cs]
    result["verdict"] = "fail" if "fail" in verdicts else "inconclusive" if "inconclusive" in verdicts else "pass"
    # The reason leads with the most telling check: convergence speed, then the final metric, then the curve.
    order = ("steps_to_target", "final_metric", "final_eval_loss", "exact", "curve", "envelope")
    ranked = sorted(cs, key=lambda c: order.index(c["name"]) if c["name"] in order else len(order))
    lead = next((c for c in ranked if c["verdict"] == result["verdict"]), None) if result["verdict"] != "pass" else None
    result["reason"] = lead["reason"] if lead else "; ".join(c["reason"] for c in cs if c["name"] in order[:-1])
    result["rollback"] = [rollback_line(c, rules) for c in cs if c["verdict"] == "fail"]
    return result


def rollback_line(c: dict, rules: Rules) -> str:
    limit = getattr(rules, c["rule"], None) if hasattr(rules, c["rule"]) else None
    rule = f"{c['rule']}={limit}" if limit is not None else c["rule"]
    return f"rollback recommended: {rule}: {c['reason']}"
