"""The stages of ``rubin qualify``. Each takes the shared context and returns (status, detail);
status is ok, fail (the stage ran and found a problem), error (it could not run) or skipped.

Library functions are called directly; only training runs in child processes (a trainer owns
signal handlers and process groups, and a crash there must not take the qualification down).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rubin.runs import write_json_atomic

# The reference workload when the user gives none: a short MLP on the bundled digits (quick), or
# the ViT-on-digits demo (full). Both log eval often enough for steps-to-target.
REFERENCE = {
    "quick": {"model.name": "mlp", "model.args": "{hidden: 64, depth: 2}", "data.name": "digits", "data.batch_size": "64",
              "run.max_steps": "100", "run.epochs": "null", "run.eval_every_steps": "10", "optim.name": "sgd",
              "optim.lr": "0.05", "optim.warmup_steps": "5", "optim.weight_decay": "0", "optim.grad_clip": "0.5",
              "telemetry.log_every_steps": "2", "checkpoint.save_final": "false", "run.deterministic": "true"},
    "full": {"run.max_steps": "600", "run.epochs": "null", "run.eval_every_steps": "50", "telemetry.log_every_steps": "10"},
}


@dataclass
class Context:
    out: Path
    quick: bool
    seeds: int
    baseline: Path | None
    workload: str | None
    prices: str | None
    work: float
    keep_going: bool
    skip: set = field(default_factory=set)  # stage names the user left out
    files: dict[str, Path] = field(default_factory=dict)  # what each stage wrote, for the report and the certificate
    runs: list[Path] = field(default_factory=list)
    stop: str | None = None  # set when a stage makes the rest meaningless


def doctor(ctx: Context):
    from rubin.doctor import registry, report
    from rubin.platform.probe import probe
    from rubin.platform.sources import Sources

    facts = probe(Sources(run_dir=str(ctx.out)))
    findings = registry.run_checks(facts)
    doc = report.build(facts, findings, n_checks=len({f.check for f in findings}))
    ctx.files["doctor"] = _save(ctx, "doctor.json", doc)
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        if not ctx.keep_going:
            ctx.stop = "doctor found errors: fix them first (or pass --keep-going to measure anyway)"
        return "fail", f"{len(errors)} error(s): " + "; ".join(f.title for f in errors[:3])
    s = doc["summary"]
    return "ok", f"no errors ({s.get('warn', 0)} warnings, {len(findings)} findings)"


def bench(ctx: Context):
    from rubin.bench import results, suites

    c = suites.make_context("auto", quick=ctx.quick, workdir=ctx.out)
    if c.gpu_count == 0:
        c.quick = True  # as rubin bench: the full preset is for GPUs
    names = list(suites.SUITES)
    doc = suites.run(names, c, {})
    ctx.files["bench"] = results.save(doc, ctx.out / "bench.json")
    failed = [n for n, e in doc["benchmarks"].items() if e["status"] == "error"]
    if failed:
        return "fail", f"{', '.join(failed)} failed (see bench.json)"
    return "ok", f"{len(names)} suites, {doc['preset']} preset, {doc['wall_s']:.0f} s"


def compare(ctx: Context):
    if ctx.baseline is None:
        return "skipped", "no --baseline"
    if "bench" not in ctx.files:
        return "skipped", "no bench results (the bench stage did not run)"
    if not (ctx.baseline / "bench.json").is_file():
        return "skipped", "the baseline bundle has no bench.json"
    from rubin.bench import compare as cmp
    from rubin.bench import results

    base = results.load(ctx.baseline / "bench.json")
    new = results.load(ctx.files["bench"])
    base["_path"], new["_path"] = str(ctx.baseline / "bench.json"), str(ctx.files["bench"])
    rep = cmp.compare(base, new, cmp.load_rules(None))
    ctx.files["compare"] = _save(ctx, "compare.json", rep)
    c = rep["counts"]
    detail = f"{rep['verdict']}: {c['pass']} pass, {c['marginal']} marginal, {c['fail']} fail"
    return ("fail" if rep["verdict"] == "fail" else "ok"), detail


def workload_sets(ctx: Context) -> tuple[str | None, dict]:
    """(config file or None, --set overrides) of the workload: the user's, the baseline's, or the reference."""
    if ctx.workload:
        return ctx.workload, {}
    if ctx.baseline is not None and (ctx.baseline / "workload.yaml").is_file():
        return str(ctx.baseline / "workload.yaml"), {}
    return None, dict(REFERENCE["quick" if ctx.quick else "full"])


def workload(ctx: Context):
    config, sets = workload_sets(ctx)
    runs_dir = ctx.out / "runs"
    done = []
    for seed in range(ctx.seeds):
        run_dir = runs_dir / f"seed-{seed}"
        args = [sys.executable, "-m", "rubin", "train", *([config] if config else []), "--quiet", "--no-resume",
                *[x for k, v in {**sets, "run.dir": str(run_dir), "run.seed": str(seed)}.items() for x in ("--set", f"{k}={v}")]]
        env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        p = subprocess.run(args, capture_output=True, text=True, env=env)
        if p.returncode != 0:
            last = (p.stderr.strip().splitlines() or ["no output"])[-1]
            return ("error" if not done else "fail"), f"seed {seed} exited {p.returncode}: {last}"
        done.append(run_dir)
    ctx.runs = done
    s = json.loads((done[0] / "summary.json").read_text())
    seeds = f"{len(done)} seed{'s' if len(done) != 1 else ''}"
    return "ok", f"{seeds}, {s.get('steps')} steps each, {s.get('samples_per_s', 0):,.0f} samples/s (seed 0)"


def verify(ctx: Context):
    if ctx.baseline is None:
        return "skipped", "no --baseline"
    if not ctx.runs:
        return "skipped", "no workload runs"
    from rubin.verify.core import verify as run_verify

    base = sorted(p for p in (ctx.baseline / "runs").iterdir() if p.is_dir()) if (ctx.baseline / "runs").is_dir() else []
    if not base:
        return "error", f"the baseline {ctx.baseline} has no runs/ to verify against"
    result = run_verify(base, ctx.runs)
    ctx.files["verify"] = _save(ctx, "verify.json", result)
    return ("fail" if result["verdict"] == "fail" else "ok"), f"{result['verdict']} ({result['method']}): {result['reason']}"


def plan_cost(ctx: Context):
    if not ctx.prices:
        return "skipped", "no --prices"
    if not ctx.runs:
        return "skipped", "no measured throughput (the workload stage did not finish)"
    from rubin.plan import prices, throughput
    from rubin.plan.cost import CostRequest, plan

    device = str(json.loads((ctx.runs[0] / "summary.json").read_text()).get("device") or "")
    if throughput.on_cpu(device):  # a CPU rate priced as GPU hours would be wrong by orders of magnitude
        return "skipped", "the workload ran on the CPU, so there is no GPU rate to price; qualify on the GPU node"
    req = CostRequest(throughput=throughput.from_summary(ctx.runs[0]), work=ctx.work, unit="samples", prices=prices.load(ctx.prices))
    result = plan(req)
    ctx.files["plan-cost"] = _save(ctx, "plan-cost.json", result)
    best = result["options"][0] if result["options"] else None
    return "ok", (f"best: {best['name']}, {best['on_demand_cost']:,.0f} {result['currency']} on demand for {ctx.work:g} samples"
                  if best else "no option")


def _save(ctx: Context, name: str, doc: dict) -> Path:
    path = ctx.out / name
    write_json_atomic(path, doc)
    return path


STAGES = (("doctor", doctor), ("bench", bench), ("compare", compare), ("workload", workload), ("verify", verify),
          ("plan cost", plan_cost))
