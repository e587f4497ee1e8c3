"""``qualify(ctx)``: run the stages in order, keep going past a failed one where the next can run,
write report.html and certificate.json, and optionally the baseline bundle."""

from __future__ import annotations

import datetime as dt
import shutil
import time
from pathlib import Path

from rubin.qualify import certificate as cert_mod
from rubin.qualify.stages import STAGES, Context, workload_sets
from rubin.runs import write_json_atomic

BUNDLE_KIND = "rubin.qualify.baseline"


def verdict_of(stages: list[dict]) -> tuple[str, str]:
    failed = [s for s in stages if s["status"] == "fail"]
    errors = [s for s in stages if s["status"] == "error"]
    if failed:
        return "fail", "; ".join(f"{s['name']}: {s['detail']}" for s in failed)
    if errors:
        return "inconclusive", "; ".join(f"{s['name']} could not run: {s['detail']}" for s in errors)
    ran = [s["name"] for s in stages if s["status"] == "ok"]
    return "pass", f"{len(ran)} stages passed ({', '.join(ran)})"


def qualify(ctx: Context, *, on_start=None, on_done=None, sign_key=None) -> dict:
    ctx.out.mkdir(parents=True, exist_ok=True)
    stages = []
    for i, (name, fn) in enumerate(STAGES):
        if on_start:
            on_start(i, name)
        t0 = time.perf_counter()
        if name.replace(" ", "-") in ctx.skip:
            status, detail = "skipped", "--skip"
        elif ctx.stop:
            status, detail = "skipped", ctx.stop
        else:
            try:
                status, detail = fn(ctx)
            except Exception as err:  # noqa: BLE001 - a stage that breaks is reported; the later ones still run
                status, detail = "error", f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        stage = {"name": name, "status": status, "wall_s": round(time.perf_counter() - t0, 2), "detail": detail}
        stages.append(stage)
        if on_done:
            on_done(i, stage)
    return finish(ctx, stages, on_start=on_start, on_done=on_done, sign_key=sign_key)


def finish(ctx: Context, stages: list[dict], *, on_start=None, on_done=None, sign_key=None) -> dict:
    from rubin import __version__
    from rubin.platform.fingerprint import fingerprint

    i = len(stages)
    if on_start:
        on_start(i, "report")
    t0 = time.perf_counter()
    verdict, reason = verdict_of(stages)
    cert = {"schema_version": cert_mod.SCHEMA_VERSION, "kind": cert_mod.KIND, "verdict": verdict, "reason": reason,
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "rubin_version": __version__,
            "preset": "quick" if ctx.quick else "full", "seeds": ctx.seeds,
            "baseline": str(ctx.baseline) if ctx.baseline else None, "stages": stages, "env": fingerprint(), "inputs": {}}
    cert_path = ctx.out / "certificate.json"
    write_json_atomic(cert_path, cert)  # a first copy, so the report can show the stages
    report_stage = {"name": "report", "status": "ok", "wall_s": 0.0, "detail": ""}
    try:
        from rubin.report.page import write

        inputs = [cert_path] + [ctx.files[k] for k in ("verify", "doctor", "bench", "compare") if k in ctx.files]
        inputs += ctx.runs[:1] + [ctx.files[k] for k in ("plan-cost",) if k in ctx.files]
        write(inputs, ctx.out / "report.html", "html", title=f"rubin qualify: {verdict.upper()}")
        report_stage["detail"] = "report.html"
    except Exception as err:  # noqa: BLE001 - the certificate is still written
        report_stage.update(status="error", detail=f"{type(err).__name__}: {err}")
    report_stage["wall_s"] = round(time.perf_counter() - t0, 2)
    stages.append(report_stage)
    if on_done:
        on_done(i, report_stage)
    cert["stages"] = stages
    cert["verdict"], cert["reason"] = verdict_of(stages)
    evidence = [p for k, p in ctx.files.items()] + ctx.runs + [ctx.out / "report.html"]
    if ctx.baseline is not None:
        evidence.append(ctx.baseline)
    if ctx.workload:
        evidence.append(Path(ctx.workload))
    if ctx.prices:
        evidence.append(Path(ctx.prices))
    cert["inputs"] = cert_mod.hash_tree([p for p in evidence if Path(p).exists()], ctx.out)
    if sign_key is not None:
        cert_mod.sign(cert, sign_key)
    write_json_atomic(cert_path, cert)
    return cert


def save_baseline(ctx: Context, dest: Path) -> Path:
    """The bundle another platform is verified against: bench.json, runs/seed-*, workload.yaml, baseline.json."""
    from rubin.errors import UsageError

    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise UsageError(f"--save-baseline {str(dest)!r} exists and is not empty; refusing to overwrite a baseline, choose a new DIR")
    if not ctx.runs:
        raise UsageError("no baseline written: the workload stage did not finish (see the stages above)")
    tmp = dest.with_name(f".{dest.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if "bench" in ctx.files:  # without it the new platform's compare stage is skipped, and says so
        shutil.copy2(ctx.files["bench"], tmp / "bench.json")
    for run in ctx.runs:  # checkpoints stay behind: verify reads curves and summaries, not weights
        shutil.copytree(run, tmp / "runs" / run.name, ignore=shutil.ignore_patterns("checkpoints", "heartbeats"))
    shutil.copy2(ctx.runs[0] / "config.yaml", tmp / "workload.yaml")
    config, sets = workload_sets(ctx)
    write_json_atomic(tmp / "baseline.json", {"schema_version": 1, "kind": BUNDLE_KIND, "preset": "quick" if ctx.quick else "full",
                                              "seeds": len(ctx.runs), "workload": config or "reference",
                                              "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")})
    if dest.exists():
        dest.rmdir()
    tmp.rename(dest)
    return dest


def check_bundle(path) -> Path:
    from rubin.errors import UsageError

    p = Path(path)
    hint = "make one on the old platform with: rubin qualify --save-baseline DIR"
    if not p.is_dir():
        raise UsageError(f"--baseline {str(p)!r} is not a directory; {hint}")
    meta = p / "baseline.json"
    if not meta.is_file():
        raise UsageError(f"--baseline {str(p)!r} is not a baseline bundle (no baseline.json); {hint}")
    import json

    try:
        kind = json.loads(meta.read_text()).get("kind")
    except (ValueError, UnicodeDecodeError, AttributeError):
        kind = None
    if kind != BUNDLE_KIND:
        raise UsageError(f"--baseline {str(p)!r}: baseline.json has kind={kind!r}, expected {BUNDLE_KIND!r}; {hint}")
    return p
