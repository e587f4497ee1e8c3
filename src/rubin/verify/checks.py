"""The checks behind a verdict. Each returns ``{name, rule, verdict, reason, numbers}``;
verdict is pass, fail or inconclusive and the reason is a sentence a person can act on."""

from __future__ import annotations

import math

from rubin.verify import stats


def check(name: str, rule: str, verdict: str, reason: str, **numbers) -> dict:
    return {"name": name, "rule": rule, "verdict": verdict, "reason": reason, "numbers": numbers}


def smooth(values: list[float], window: int) -> list[float]:
    """Trailing mean over ``window`` points (fewer at the start), the same on both sides."""
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def common_steps(runs) -> list[int]:
    steps = set(runs[0].loss)
    for r in runs[1:]:
        steps &= set(r.loss)
    return sorted(steps)


def mean_curve(runs, steps, window) -> list[float]:
    curves = [smooth([r.loss[s] for s in steps], window) for r in runs]
    return [stats.mean(col) for col in zip(*curves)]


def fmt(x: float) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return str(x)
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.4g}"


def spread(xs: list[float], f=None) -> str:
    f = f or fmt
    return f"{f(stats.mean(xs))} ± {f(stats.std(xs))} over {len(xs)} seed{'s' if len(xs) != 1 else ''}"


# -- exact ----------------------------------------------------------------------------------------
def exact(a, b) -> dict:
    da, db = a.summary.get("param_digest"), b.summary.get("param_digest")
    steps = sorted(set(a.loss) | set(b.loss))
    for s in steps:
        if a.loss.get(s) != b.loss.get(s):
            return check("exact", "exact", "fail", f"the runs diverge at step {s}: loss {a.loss.get(s)!r} against "
                         f"{b.loss.get(s)!r} (baseline); deterministic runs of one config must match bit for bit",
                         first_divergent_step=s, baseline=a.loss.get(s), new=b.loss.get(s))
    if da != db:
        return check("exact", "exact", "fail", f"every logged loss matches, but param_digest differs ({str(db)[:12]} against "
                     f"{str(da)[:12]}): the weights diverged after the last logged step", baseline=da, new=db)
    return check("exact", "exact", "pass", f"bit-identical: {len(steps)} logged losses and param_digest {str(da)[:12]} match",
                 steps=len(steps))


# -- curve ----------------------------------------------------------------------------------------
def curve(base_runs, new_runs, rules) -> dict:
    steps = common_steps(base_runs + new_runs)
    if not steps:
        return check("curve", "curve_tolerance_pct", "inconclusive", "the two sides share no logged step; log at the same steps")
    b = mean_curve(base_runs, steps, rules.smoothing_steps)
    n = mean_curve(new_runs, steps, rules.smoothing_steps)
    rel = [abs(y - x) / max(abs(x), 1e-12) * 100 for x, y in zip(b, n)]
    worst = max(range(len(rel)), key=rel.__getitem__)
    tol = rules.curve_tolerance_pct
    nums = dict(max_rel_diff_pct=rel[worst], at_step=steps[worst], baseline=b[worst], new=n[worst], tolerance_pct=tol, steps=len(steps))
    if rel[worst] > tol:
        side = "higher" if n[worst] > b[worst] else "lower"
        return check("curve", "curve_tolerance_pct", "fail", f"new loss is {rel[worst]:.2f}% {side} at step {steps[worst]} "
                     f"({fmt(n[worst])} against {fmt(b[worst])}), past the {tol:g}% tolerance", **nums)
    return check("curve", "curve_tolerance_pct", "pass", f"every logged loss within {tol:g}% (largest {rel[worst]:.2f}% at step "
                 f"{steps[worst]}, over {len(steps)} steps)", **nums)


# -- statistical ----------------------------------------------------------------------------------
def envelope(base_runs, new_runs, rules) -> tuple[dict, dict]:
    steps = common_steps(base_runs + new_runs)
    w = rules.smoothing_steps
    curves = [smooth([r.loss[s] for s in steps], w) for r in base_runs]
    lo = [min(c) for c in zip(*curves)]
    hi = [max(c) for c in zip(*curves)]
    # Three seeds' min-max underestimates the seed spread (a 4th seed falls outside it half the time), so the
    # envelope is widened by a share of the loss and by a multiple of its own width at that step.
    m, k = rules.envelope_margin_pct / 100, rules.envelope_widen_by_range
    lo_w = [x - m * abs(x) - k * (h - x) for x, h in zip(lo, hi)]
    hi_w = [h + m * abs(h) + k * (h - x) for x, h in zip(lo, hi)]
    new = mean_curve(new_runs, steps, w)
    above = [s for s, y, h in zip(steps, new, hi_w) if y > h]
    below = [s for s, y, lw in zip(steps, new, lo_w) if y < lw]
    figure = {"steps": steps, "base_min": lo, "base_max": hi, "base_min_widened": lo_w, "base_max_widened": hi_w,
              "new_mean": new, "new_runs": [smooth([r.loss[s] for s in steps], w) for r in new_runs]}
    if not steps:
        return check("envelope", "envelope_max_outside_pct", "inconclusive", "the sides share no logged step"), figure
    out_pct = 100 * (len(above) + len(below)) / len(steps)
    nums = dict(outside_pct=out_pct, above=len(above), below=len(below), steps=len(steps), margin_pct=rules.envelope_margin_pct,
                allowed_pct=rules.envelope_max_outside_pct)
    if out_pct > rules.envelope_max_outside_pct:
        side, first = ("above (higher loss)", above[0]) if len(above) >= len(below) else ("below (lower loss)", below[0])
        return check("envelope", "envelope_max_outside_pct", "fail", f"the new loss curve is outside the baseline envelope "
                     f"(min-max of {len(base_runs)} seeds, widened) at {out_pct:.0f}% of steps, mostly "
                     f"{side}, from step {first}; allowed {rules.envelope_max_outside_pct:g}%", **nums), figure
    return check("envelope", "envelope_max_outside_pct", "pass", f"the new loss curve stays inside the baseline envelope at "
                 f"{100 - out_pct:.0f}% of {len(steps)} steps", **nums), figure


def resolve_metric(runs, name: str):
    """(metric, higher_is_better), or (None, None) when the runs log no eval."""
    last = [r.evals[-1] for r in runs if r.evals]
    if len(last) < len(runs):
        return None, None
    if name == "auto":
        name = "accuracy" if all("accuracy" in e for e in last) else "eval_loss"
    if not all(isinstance(e.get(name), (int, float)) for e in last):
        return name, None
    return name, not any(w in name for w in ("loss", "perplexity", "error"))


def _judge(name, rule, what, base, new, tol_pct, rules, shared, *, unit="", better_word=("better", "worse"), higher_better=True,
           f=fmt):
    ob, on = stats.olympic(base), stats.olympic(new)
    test = stats.ttest(ob, on, rules.t_test)
    mb = stats.mean(ob)
    change = 100 * test.diff / abs(mb) if mb else (0.0 if test.diff == 0 else math.inf)
    olympic = " (olympic: best and worst dropped)" if len(ob) < len(base) or len(on) < len(new) else ""
    word = better_word[0] if (test.diff > 0) == higher_better else better_word[1]
    nums = dict(baseline=base, new=new, baseline_mean=mb, baseline_std=stats.std(ob), new_mean=stats.mean(on),
                change_pct=change, p=test.p, t=test.t, df=test.df, test=test.method, tolerance_pct=tol_pct, olympic=bool(olympic))
    text = (f"{what} {f(stats.mean(on))}{unit} against {spread(ob, f)}{olympic} "
            f"({change:+.1f}%, p={test.p:.3g})")
    # The verdict fails when any of its t-tests rejects, so they share alpha (Bonferroni): each of the
    # ``shared`` tests uses alpha / shared and a benign change fails one of them at most alpha of the time.
    level = rules.alpha / shared
    resolvable = 100 * test.resolvable(level) / abs(mb) if mb else math.inf
    nums["resolvable_pct"] = resolvable
    if abs(change) <= tol_pct:
        return check(name, rule, "pass", f"within {tol_pct:g}%: {text}", direction=word if test.diff else "same", **nums)
    if test.p < level:
        return check(name, rule, "fail", f"new is {abs(change):.0f}% {word}: {text}", direction=word, **nums)
    if test.p < rules.alpha:
        # Significant on its own, not at its share of alpha: the evidence leans, and more seeds settle it.
        return check(name, rule, "inconclusive", f"new looks {abs(change):.0f}% {word}: {text}; significant at {rules.alpha:g} "
                     f"alone, not at {level:.3g} (its share of alpha over {shared} tests); run more seeds", direction=word, **nums)
    return check(name, rule, "pass", f"no significant change: {text}; these seeds resolve changes of "
                 f"±{resolvable:.0f}% or more", direction=word if test.diff else "same", **nums)


def t_tests(base_runs, new_runs, rules) -> list[dict]:
    """Final metric, final eval loss (when the metric is another one) and steps-to-target, sharing alpha."""
    metric, _ = resolve_metric(base_runs + new_runs, rules.metric)
    last = [r.evals[-1] for r in base_runs + new_runs if r.evals]
    with_loss = metric not in (None, "eval_loss") and len(last) == len(base_runs + new_runs) and all(
        isinstance(e.get("eval_loss"), (int, float)) for e in last)
    shared = 3 if with_loss else 2
    out = [final_metric(base_runs, new_runs, rules, shared)]
    if with_loss:
        out.append(final_eval_loss(base_runs, new_runs, rules, shared))
    return out + [steps_to_target(base_runs, new_runs, rules, shared)]


def final_metric(base_runs, new_runs, rules, shared=2) -> dict:
    metric, hb = resolve_metric(base_runs + new_runs, rules.metric)
    if metric is None or hb is None:
        why = "no eval.jsonl on every run" if metric is None else f"metric {metric!r} is not in every run's last eval"
        return check("final_metric", "final_metric_max_change_pct", "inconclusive",
                     f"final metric not compared: {why}; set run.eval_every_steps (and rules metric)")
    base = [r.evals[-1][metric] for r in base_runs]
    new = [r.evals[-1][metric] for r in new_runs]
    return _judge("final_metric", "final_metric_max_change_pct", f"final {metric}", base, new, rules.final_metric_max_change_pct,
                  rules, shared, higher_better=hb) | {"metric": metric}


def final_eval_loss(base_runs, new_runs, rules, shared) -> dict:
    """The last eval loss beside an accuracy-like metric. Accuracy moves in steps of 1/eval-samples and
    saturates; the loss keeps the model's confidence, so it separates a changed convergence from seed
    noise with fewer seeds (on the reference workload: 4 seed sds for lr 2x, against 2.6 for accuracy)."""
    base = [r.evals[-1]["eval_loss"] for r in base_runs]
    new = [r.evals[-1]["eval_loss"] for r in new_runs]
    return _judge("final_eval_loss", "final_eval_loss_max_change_pct", "final eval_loss", base, new,
                  rules.final_eval_loss_max_change_pct, rules, shared, higher_better=False) | {"metric": "eval_loss"}


def _reach(run, metric, target, hb):
    """The first (linearly interpolated) step at which the eval metric reaches ``target``, or None."""
    prev = None
    for e in run.evals:
        v = e.get(metric)
        if not isinstance(v, (int, float)):
            continue
        if (v >= target) if hb else (v <= target):
            if prev is None or prev[1] == v:
                return float(e["step"])
            (s0, v0), s1 = prev, e["step"]
            return s0 + (s1 - s0) * (target - v0) / (v - v0)
        prev = (e["step"], v)
    return None


def steps_to_target(base_runs, new_runs, rules, shared=2) -> dict:
    name, rule = "steps_to_target", "steps_to_target_max_change_pct"
    metric, hb = resolve_metric(base_runs + new_runs, rules.metric)
    if metric is None or hb is None:
        return check(name, rule, "inconclusive", "steps-to-target not compared: the runs log no eval metric; set run.eval_every_steps")
    if rules.target == "auto":
        # 90% of the way from the first eval to the weakest baseline seed's best: on the steep part of the
        # curve, where steps-to-target is informative, not on the plateau, where it is a coin toss.
        series = [[e[metric] for e in r.evals if isinstance(e.get(metric), (int, float))] for r in base_runs]
        start = stats.mean([v[0] for v in series])
        weakest = min(max(v) for v in series) if hb else max(min(v) for v in series)
        target = start + 0.9 * (weakest - start)
    else:
        target = float(rules.target)
    base = [_reach(r, metric, target, hb) for r in base_runs]
    new = [_reach(r, metric, target, hb) for r in new_runs]
    if any(s is None for s in base):
        return check(name, rule, "inconclusive", f"not every baseline seed reaches {metric} {fmt(target)}; lower the target", target=target)
    missed = sum(s is None for s in new)
    if missed:
        return check(name, rule, "fail", f"new converges slower: {missed} of {len(new)} new runs never reach {metric} {fmt(target)} "
                     f"(baseline: step {spread(base, lambda x: f'{x:,.0f}')})",
                     direction="slower", target=target, metric=metric, baseline=base, new=new)
    return _judge(name, rule, "steps-to-target", base, new, rules.steps_to_target_max_change_pct, rules, shared,
                  unit=f" (to {metric} {fmt(target)})", better_word=("slower", "faster"), higher_better=True,
                  f=lambda x: f"{x:,.0f}") | {"target": target, "metric": metric}


def events(new_runs, rules) -> list[dict]:
    out = []
    for kind, rule in (("nan", "max_nan_events"), ("rollback", "max_rollback_events")):
        limit = getattr(rules, rule)
        worst = max(new_runs, key=lambda r: r.event_counts.get(kind, 0))
        n = worst.event_counts.get(kind, 0)
        verdict = "fail" if n > limit else "pass"
        out.append(check(f"{kind}_events", rule, verdict, f"{n} {kind} event(s) in {worst.path} (allowed {limit})"
                         if n else f"no {kind} events in the new runs", count=n, limit=limit))
    return out
