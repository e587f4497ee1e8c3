"""One section per input, as a list of blocks that both the HTML and the Markdown writers render.

Blocks: ("p", text), ("verdict", level, text), ("table", headers, rows), ("fig", caption, svg).
Every figure that has a spread shows it (bands, whiskers, ranges); projections say so.
"""

from __future__ import annotations

import math

from rubin.report import svg


def num(x, unit: str = "") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    a = abs(x)
    s = f"{x:,.0f}" if a >= 1000 else f"{x:.3g}" if a >= 0.001 or a == 0 else f"{x:.2e}"
    return s + unit


def fig_range(f: dict | None, unit: str = "") -> str:
    """median [ci95 or min-max] (n) of a bench figure."""
    if not f or f.get("median") is None:
        return "-"
    ci = f.get("ci95") or [f.get("min"), f.get("max")]
    lo, hi = (ci + [None, None])[:2]
    spread = f" [{num(lo)}, {num(hi)}]" if lo is not None and hi is not None else ""
    return f"{num(f['median'])}{unit}{spread}" + (f" n={f['n']}" if f.get("n") else "")


def gib(b) -> str:
    return "-" if b is None else f"{b / 2**30:.2f} GiB"


class Section:
    def __init__(self, kind: str, title: str, source: str):
        self.kind, self.title, self.source = kind, title, source
        self.blocks: list[tuple] = []

    def p(self, text: str):
        self.blocks.append(("p", text))

    def verdict(self, level: str, text: str):
        self.blocks.append(("verdict", level, text))

    def table(self, headers, rows):
        if rows:
            self.blocks.append(("table", list(headers), [[str(c) for c in r] for r in rows]))

    def fig(self, caption: str, image: str):
        if image:
            self.blocks.append(("fig", caption, image))


def _get(d, dotted, default=None):
    for part in dotted.split("."):
        if not isinstance(d, dict):
            return default
        d = d.get(part)
    return default if d is None else d


def env(data: dict, src: str) -> Section:
    s = Section("env", "Environment fingerprint", src)
    gpu = data.get("gpu") or {}
    rows = [("host", _get(data, "host.hostname")), ("OS", _get(data, "host.os")), ("kernel", _get(data, "host.kernel")),
            ("CPU", f"{_get(data, 'host.cpu_model')} x{_get(data, 'host.cpu_count')}"), ("RAM", gib(_get(data, "host.ram_bytes"))),
            ("GPUs", f"{gpu.get('count', 0)} x {', '.join(sorted(set(gpu.get('names') or []))) or '-'}"),
            ("driver", gpu.get("driver_version") or "-"), ("CUDA driver", gpu.get("cuda_driver_version") or "-"),
            ("torch", _get(data, "torch.version")), ("torch CUDA", _get(data, "torch.cuda", "-")),
            ("NCCL", _get(data, "torch.nccl", "-")), ("python", _get(data, "python.version")), ("rubin", _get(data, "rubin.version")),
            ("scheduler", _get(data, "scheduler.kind")), ("collected", data.get("collected_at"))]
    s.table(("field", "value"), rows)
    return s


def doctor(data: dict, src: str) -> Section:
    s = Section("doctor", "Doctor: machine diagnosis", src)
    sm = data.get("summary") or {}
    worst = sm.get("worst", "ok")
    level = {"ok": "pass", "info": "pass", "warn": "inconclusive"}.get(worst, "fail")
    counts = ", ".join(f"{sm[k]} {k.replace('_', ' ')}" for k in sm if k not in ("worst", "failed_checks") and isinstance(sm[k], int))
    s.verdict(level, f"worst finding: {worst} ({counts}); {data.get('checks_run', '?')} checks on {data.get('host', '?')}")
    found = data.get("findings", [])
    s.table(("severity", "finding", "evidence", "fix"),
            [(f["severity"], f["title"], f.get("evidence", ""), "; ".join(f.get("fix") or [])) for f in found if f["severity"] != "ok"])
    ok = [f["title"] for f in found if f["severity"] == "ok" and not f.get("skipped")]
    if ok:  # passing checks in one paragraph: a reader scans for what is wrong
        s.p(f"{len(ok)} checks ok: {'; '.join(ok)}")
    na = [f["title"] for f in found if f.get("skipped")]
    if na:
        why = next(f["skipped"] for f in found if f.get("skipped"))
        s.p(f"{len(na)} checks not applicable ({why}): {'; '.join(na)}")
    return s


def doctor_checks(data: dict, src: str) -> Section:
    s = Section("doctor", "Doctor: the checks", src)
    s.table(sorted({k for c in data.get("checks", []) for k in c}), [[c.get(k, "") for k in sorted({k for c in data["checks"] for k in c})]
                                                                   for c in data.get("checks", [])])
    return s


def bench(data: dict, src: str) -> Section:
    s = Section("bench", f"Bench: {data['device']['name']} x{data['device']['count']} ({data['preset']} preset)", src)
    b = data["benchmarks"]
    s.p(f"created {data['created']}; spec: {(data.get('spec') or {}).get('key') or 'none (an unknown device gets no spec numbers)'}")
    s.table(("benchmark", "status", "wall", "notes"), [(k, e["status"], num(e.get("wall_s"), " s"), " ".join(e.get("notes") or [])[:160]
                                                        or (e.get("error") or "")) for k, e in b.items()])
    coll = (b.get("collectives") or {}).get("rows") or []
    if coll:
        series, bands = [], []
        for i, op in enumerate(dict.fromkeys(r["op"] for r in coll)):
            rows = sorted((r for r in coll if r["op"] == op), key=lambda r: r["bytes"])
            c = svg.PALETTE[i % len(svg.PALETTE)]
            xs = [r["bytes"] for r in rows]
            series.append({"label": op, "xs": xs, "ys": [r["busbw_gbps"]["median"] for r in rows], "color": c, "markers": True})
            bands.append({"xs": xs, "lo": [r["busbw_gbps"]["ci95"][0] for r in rows], "hi": [r["busbw_gbps"]["ci95"][1] for r in rows],
                          "color": c})
        s.fig(f"Bus bandwidth against message size, {coll[0]['ranks']} ranks (median, band: 95% CI)",
              svg.lines(series, bands=bands, title="busbw vs message size", xlabel="message size", ylabel="busbw (GB/s)", logx=True,
                        xfmt=svg.bytes_label))
    mm = b.get("matmul") or {}
    items, pct = [], []
    for dev, per in (mm.get("summary") or {}).items():
        for dtype, sm in per.items():
            best = [r for r in mm.get("rows", []) if r["device"] == dev and r["dtype"] == dtype]
            top = max(best, key=lambda r: r["tflops"]["median"] or 0) if best else None
            lo, hi = (top["tflops"]["min"], top["tflops"]["max"]) if top else (None, None)
            items.append({"label": f"{dev} {dtype}", "value": sm["mamf_tflops"], "lo": lo, "hi": hi})
            if sm.get("pct_of_spec") is not None:
                pct.append({"label": f"{dev} {dtype}", "value": sm["pct_of_spec"]})
    if items:
        s.fig("Matmul: best shape's TFLOPS per device (whiskers: min-max over trials)",
              svg.bars(items, title="matmul TFLOPS per device", ylabel="TFLOPS"))
    if pct:
        s.fig("Matmul as a percentage of the spec's dense peak", svg.bars(pct, title="matmul % of spec", ylabel="% of spec",
                                                                          ref=(100, "spec")))
    elif items:
        s.p("matmul % of spec: not shown, there is no spec row for this device (rubin never borrows another GPU's numbers)")
    mb = b.get("membw") or {}
    devs = []
    for dev, sm in (mb.get("summary") or {}).items():
        row = next((r for r in mb.get("rows", []) if r.get("device") == dev and r.get("bytes") == sm.get("bytes")), None)
        lo, hi = (row["gbps"].get("ci95") or [None, None]) if row and isinstance(row.get("gbps"), dict) else (None, None)
        devs.append({"label": dev, "value": sm["gbps"], "lo": lo, "hi": hi})
    if devs:
        s.fig("Memory copy bandwidth per device (whiskers: 95% CI)", svg.bars(devs, title="memory bandwidth per device", ylabel="GB/s"))
    model = (b.get("model") or {}).get("rows") or []
    s.table(("model", "precision", "world", "samples/s median [CI]", "MFU (of MAMF)"),
            [(r["workload"], r["precision"], r.get("world_size"), fig_range(r.get("samples_per_s")),
              num((b["model"]["summary"].get(f"{r['workload']}/{r['precision']}") or {}).get("mamf_mfu"))) for r in model])
    return s


def compare(data: dict, src: str) -> Section:
    s = Section("compare", "Compare: bench against baseline", src)
    c = data["counts"]
    s.verdict({"pass": "pass", "marginal": "inconclusive"}.get(data["verdict"], "fail"),
              f"{data['verdict'].upper()}: {c.get('pass', 0)} pass, {c.get('marginal', 0)} marginal, {c.get('fail', 0)} fail, "
              f"{len(data.get('outliers') or [])} peer outliers")
    s.table(("workload", "baseline", "new", "speedup"), [(r["workload"], num(r["baseline"]), num(r["new"]), f"{r['speedup']:.2f}x")
                                                         for r in data.get("speedup") or []])
    rows = [r for r in data.get("metrics", []) if r["verdict"] != "pass"] or data.get("metrics", [])[:25]
    s.table(("metric", "rule", "baseline", "new [95% CI]", "change", "verdict"),
            [(r["metric"], r["criterion"], num(r["baseline"]), _with_ci(r), _change(r), r["verdict"]) for r in rows])
    s.table(("metric", "device", "value", "peer median", "below"), [(o["metric"], o["device"], num(o["value"]), num(o["peer_median"]),
                                                                     f"{o['below_pct']:.1f}%") for o in data.get("outliers") or []])
    s.table(("environment field", "baseline", "new"), [(d["field"], d["baseline"], d["new"]) for d in data.get("env_diff") or []])
    return s


def _with_ci(r: dict) -> str:
    lo, hi = ((r.get("ci95") or []) + [None, None])[:2]
    return f"{num(r['new'])} [{num(lo)}, {num(hi)}]"


def _change(r: dict) -> str:
    return "-" if r.get("change_pct") is None else f"{r['change_pct']:+.1f}%"


def plan_memory(data: dict, src: str) -> Section:
    s = Section("plan", f"Plan: memory for {data['model'].get('name') or 'the model'}", src)
    s.verdict("pass" if data.get("recommended") else "inconclusive" if data.get("gpu", {}).get("budget_bytes") is None else "fail",
              data.get("verdict") or "")
    rows = data.get("strategies", [])
    s.table(("strategy", "per GPU", "fits"), [(r.get("label", r["strategy"]), gib(r["total_bytes"]), r["fits"]) for r in rows])
    budget = data["gpu"].get("budget_bytes")
    s.fig("Memory per GPU by strategy (estimate; dashed: the usable budget)",
          svg.bars([{"label": r["strategy"], "value": r["total_bytes"] / 2**30, "color": "#2ca02c" if r["fits"] else "#d62728"}
                    for r in rows], title="memory per GPU (estimate)", ylabel="GiB",
                   ref=(budget / 2**30, "budget") if budget else None))
    for n in data.get("notes") or []:
        s.p(f"note: {n}")
    return s


def plan_cost(data: dict, src: str) -> Section:
    s = Section("plan", f"Plan: time and cost ({data.get('currency', '')}, prices as of {data.get('prices_as_of', '?')})", src)
    m = data.get("measured") or {}
    s.p(f"measured: {num(m.get('throughput'))} {m.get('unit', '')}/s on {m.get('gpus')} x {m.get('gpu') or '?'} ({m.get('source')})")
    rows = []
    for o in data.get("options", []):
        tr, hr = o.get("throughput_range") or {}, o.get("hours_range") or {}
        label = " (projection)" if o.get("projection") else " (measured)"
        spot = o.get("spot") or {}
        rows.append((o.get("rank"), o["name"], f"{o['gpus']} x {o['gpu']}",
                     f"{num(o['throughput'])} [{num(tr.get('low'))}, {num(tr.get('high'))}]{label}",
                     f"{num(o['hours'])} [{num(hr.get('low'))}, {num(hr.get('high'))}]", num(o["on_demand_cost"]),
                     num(spot.get("expected_cost")) if spot else "-"))
    s.table(("rank", "option", "GPUs", f"throughput {data.get('unit', '')}/s [range]", "hours [range]", "on-demand cost", "spot expected"),
            rows)
    s.fig("On-demand cost per option (whiskers: the throughput range; projections are labelled in the table)",
          svg.bars([{"label": o["name"], "value": o["on_demand_cost"],
                     "lo": o["on_demand_cost"] * (o.get("hours_range") or {}).get("low", o["hours"]) / o["hours"] if o["hours"] else None,
                     "hi": o["on_demand_cost"] * (o.get("hours_range") or {}).get("high", o["hours"]) / o["hours"] if o["hours"] else None}
                    for o in data.get("options", [])], title="on-demand cost", ylabel=data.get("currency", "cost")))
    for n in data.get("notes") or []:
        s.p(f"note: {n}")
    return s


def plan_other(data: dict, src: str) -> Section:
    s = Section("plan", f"Plan: {data['kind'].rsplit('.', 1)[-1]}", src)
    flat = [(k, v) for k, v in data.items() if k not in ("schema_version", "kind") and not isinstance(v, (dict, list))]
    s.table(("field", "value"), [(k, num(v)) for k, v in flat])
    for k, v in data.items():
        if isinstance(v, list) and v and isinstance(v[0], dict):
            keys = [k2 for k2 in v[0] if not isinstance(v[0][k2], (dict, list))][:8]
            s.table(keys, [[num(r.get(k2)) for k2 in keys] for r in v])
    s.p("figures here are projections unless a row says measured")
    return s


def certificate(data: dict, src: str) -> Section:
    s = Section("certificate", "Qualification certificate", src)
    s.verdict(data.get("verdict", "fail"), f"{str(data.get('verdict', '?')).upper()}: {data.get('reason', '')}")
    s.table(("stage", "status", "seconds", "detail"), [(st["name"], st["status"], num(st.get("wall_s")), st.get("detail", ""))
                                                      for st in data.get("stages", [])])
    s.table(("input", "sha256"), [(k, v[:16] + "…") for k, v in (data.get("inputs") or {}).items()])
    return s
