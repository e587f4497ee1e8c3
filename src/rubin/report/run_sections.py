"""Sections for training runs and verify results: curves, throughput, time split, memory, envelope."""

from __future__ import annotations

from rubin.report import svg
from rubin.report.sections import Section, gib, num


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))] if xs else None


def run(path, src: str) -> Section:
    from rubin.runs import RunDir, last_per_step, read_jsonl
    from rubin.verify.checks import smooth

    rd = RunDir(path)
    problems: list[str] = []
    metrics = last_per_step(read_jsonl(rd.path / "metrics.jsonl", problems))
    evals = last_per_step(read_jsonl(rd.path / "eval.jsonl", problems))
    summ = rd.read_summary() or {}
    s = Section("run", f"Run: {rd.path.name}", src)
    status = summ.get("status", "not finished (no summary.json)")
    s.verdict("pass" if status == "completed" else "inconclusive", f"{status}: {summ.get('exit_reason', '')}")
    rates = [m["samples_per_s"] for m in metrics if isinstance(m.get("samples_per_s"), (int, float))]
    ev = summ.get("eval") or {}
    share = summ.get("time_share") or {}
    s.table(("field", "value"), [
        ("steps", summ.get("steps", len(metrics))), ("final loss", num(summ.get("final_loss"))),
        *[(f"eval {k}", num(v)) for k, v in ev.items() if k != "samples"],
        ("samples/s (summary median; per-step p10-p90)",
         f"{num(summ.get('samples_per_s'))} [{num(_pct(rates, 0.1))}, {num(_pct(rates, 0.9))}]" if rates else "-"),
        ("MFU", num(summ.get("mfu"))),
        ("time split", ", ".join(f"{k.removesuffix('_s')} {100 * v:.0f}%" for k, v in share.items() if v is not None) or "-"),
        ("peak memory", gib(summ.get("peak_mem_bytes"))), ("world size", summ.get("world_size")),
        ("precision / strategy", f"{summ.get('precision')} / {summ.get('strategy')}"), ("device", summ.get("device")),
        ("wall time", num(summ.get("wall_s"), " s")), ("param digest", str(summ.get("param_digest", "-"))[:16])])
    steps = [m["step"] for m in metrics if isinstance(m.get("loss"), (int, float))]
    loss = [m["loss"] for m in metrics if isinstance(m.get("loss"), (int, float))]
    if loss:
        w = max(1, len(loss) // 20)
        s.fig("Training loss per logged step (thin: raw; thick: trailing mean)",
              svg.lines([{"label": "raw", "xs": steps, "ys": loss, "width": 1, "opacity": 0.45},
                         {"label": f"mean of {w}", "xs": steps, "ys": smooth(loss, w), "color": svg.PALETTE[0]}],
                        title="training loss", xlabel="step", ylabel="loss"))
    keys = [k for k in (evals[0] if evals else {}) if k not in ("step", "samples") and isinstance(evals[0][k], (int, float))]
    if evals and keys:
        s.fig("Evaluation metrics per eval step", svg.lines(
            [{"label": k, "xs": [e["step"] for e in evals], "ys": [e.get(k) for e in evals], "markers": True} for k in keys],
            title="evaluation", xlabel="step", ylabel="value"))
    if rates:
        rs = [m["step"] for m in metrics if isinstance(m.get("samples_per_s"), (int, float))]
        s.fig("Throughput per logged step (dashed: the run's median)", svg.lines(
            [{"label": "samples/s", "xs": rs, "ys": rates, "width": 1.5},
             {"label": "median", "xs": [rs[0], rs[-1]], "ys": [_pct(rates, 0.5)] * 2, "dash": "6 4", "color": svg.PALETTE[1]}],
            title="throughput", xlabel="step", ylabel="samples/s"))
    split = summ.get("time_split") or {}
    if split:
        parts = {"data": split.get("data_s"), "compute": split.get("compute_s"), "checkpoint": split.get("ckpt_s")}
        s.fig("Where the step time went (whole run)", svg.stacked([(rd.path.name, parts)], list(parts), title="time split"))
    mem = [(m["step"], (m.get("mem") or {}).get("peak_bytes")) for m in metrics]
    mem = [(x, y) for x, y in mem if isinstance(y, (int, float))]
    if mem:
        s.fig(f"Peak memory per logged step ({(metrics[0].get('mem') or {}).get('device', '')})", svg.lines(
            [{"label": "peak", "xs": [x for x, _ in mem], "ys": [y / 2**20 for _, y in mem]}],
            title="memory", xlabel="step", ylabel="MiB"))
    for p in problems:
        s.p(f"note: {p}")
    return s


def verify(data: dict, src: str) -> Section:
    from rubin.verify.render import _fig

    s = Section("verify", f"Verify: convergence, {data['method']} method", src)
    s.verdict(data["verdict"], f"{data['verdict'].upper()}: {data['reason']}")
    s.p(f"method: {data['method']} ({data['method_reason']})")
    s.table(("check", "verdict", "reason"), [(c["name"], c["verdict"], c["reason"]) for c in data["checks"]])
    f = data.get("figure")
    if f and f.get("steps"):
        series = [{"xs": f["steps"], "ys": r, "width": 1, "opacity": 0.5, "color": svg.PALETTE[1]} for r in f["new_runs"]]
        series.append({"label": f"new (mean of {len(f['new_runs'])})", "xs": f["steps"], "ys": f["new_mean"], "color": svg.PALETTE[1],
                       "width": 2.5})
        bands = [{"label": "baseline, widened (the limit)", "xs": f["steps"], "lo": f["base_min_widened"], "hi": f["base_max_widened"],
                  "color": "#999999"},
                 {"label": f"baseline min-max ({data['baseline']['n']} seeds)", "xs": f["steps"], "lo": f["base_min"],
                  "hi": f["base_max"], "color": svg.PALETTE[0]}]
        s.fig("The baseline seeds' loss envelope with the new curve over it (smoothed the same on both sides)",
              svg.lines(series, bands=bands, title="loss: baseline envelope and new", xlabel="step", ylabel="loss"))
    b, n = data["baseline"], data["new"]
    s.table(("", "baseline", "new"), [
        ("runs (seeds)", f"{b['n']} ({', '.join(map(str, b['seeds']))})", f"{n['n']} ({', '.join(map(str, n['seeds']))})"),
        ("samples/s median (min-max)", _fig(b["samples_per_s"]), _fig(n["samples_per_s"])),
        ("MFU", _fig(b["mfu"], pct=True), _fig(n["mfu"], pct=True)),
        *[(f"time: {k.removesuffix('_s')}", _fig(b["time_share"][k], pct=True), _fig(n["time_share"][k], pct=True))
          for k in ("data_s", "compute_s", "ckpt_s")],
        *[(k.replace("_", " "), b[k], n[k]) for k in ("precision", "world_size", "strategy", "global_batch", "device")],
        ("speedup", "", f"{data['speedup']:.2f}x" if data.get("speedup") else "-")])
    rows = [(k.removesuffix("_s"), (b["time_share"][k] or {}).get("mean"), (n["time_share"][k] or {}).get("mean"))
            for k in ("data_s", "compute_s", "ckpt_s")]
    s.fig("Time split, baseline against new (seed mean)", svg.stacked(
        [("baseline", {r[0]: r[1] for r in rows}), ("new", {r[0]: r[2] for r in rows})], [r[0] for r in rows], title="time split"))
    s.table(("config key", "baseline", "new"), [(d["key"], d["baseline"], d["new"]) for d in data.get("config_diff", [])])
    s.table(("environment field", "baseline", "new"), [(d["field"], d["baseline"], d["new"]) for d in data.get("env_diff", [])])
    for line in data.get("rollback", []):
        s.verdict("fail", line)
    return s
