"""Flatten a results document into named metrics, the unit that compare rules work on.

Key layout: ``<bench>/[<device>/]<what>/<figure>``, e.g. ``matmul/cuda:0/bf16/8192x8192x8192/tflops``,
``collectives/all_reduce/4194304/busbw_gbps``, ``model/gpt124m/bf16/samples_per_s``. Per-device
metrics also carry ``device`` and ``group`` (the key without the device) for peer comparison.
"""

from __future__ import annotations


def _m(out: dict, key: str, fig: dict | None, better: str, device: str | None = None, group: str | None = None):
    if fig and fig.get("median") is not None:
        out[key] = {"figure": fig, "better": better, "device": device, "group": group or key}


def flatten(doc: dict) -> dict[str, dict]:
    out: dict[str, dict] = {}
    b = doc.get("benchmarks", {})
    for r in (b.get("matmul") or {}).get("rows", []):
        what = f"{r['dtype']}/{r['m']}x{r['n']}x{r['k']}/tflops"
        _m(out, f"matmul/{r['device']}/{what}", r["tflops"], "higher", r["device"], f"matmul/{what}")
    for r in (b.get("membw") or {}).get("rows", []):
        what = f"{r['op']}/{r['bytes']}/gbps"
        _m(out, f"membw/{r['device']}/{what}", r["gbps"], "higher", r["device"], f"membw/{what}")
    for r in (b.get("h2d") or {}).get("rows", []):
        what = f"{r['op']}_{r['memory']}/{r['bytes']}/gbps"
        _m(out, f"h2d/{r['device']}/{what}", r["gbps"], "higher", r["device"], f"h2d/{what}")
    for r in (b.get("launch") or {}).get("rows", []):
        for fig in ("wall_us", "event_us"):
            _m(out, f"launch/{r['device']}/{fig}", r[fig], "lower", r["device"], f"launch/{fig}")
    for r in (b.get("collectives") or {}).get("rows", []):
        _m(out, f"collectives/{r['op']}/{r['bytes']}/busbw_gbps", r["busbw_gbps"], "higher")
    for r in (b.get("io") or {}).get("rows", []):
        if "gbps" in r:
            _m(out, f"io/{r['op']}/gbps", r["gbps"], "higher")
        else:
            _m(out, f"io/{r['op']}/samples_per_s", r["samples_per_s"], "higher")
    for r in (b.get("model") or {}).get("rows", []):
        base = f"model/{r['workload']}/{r['precision']}"
        _m(out, f"{base}/samples_per_s", r["samples_per_s"], "higher")
        _m(out, f"{base}/tokens_per_s", r["tokens_per_s"], "higher")
        _m(out, f"{base}/step_time_median_s", r["step_time_median_s"], "lower")
        _m(out, f"{base}/step_time_p90_s", r["step_time_p90_s"], "lower")
    return out


def headline(doc: dict) -> dict[str, tuple[float, str]]:
    """The migration figures per workload: name -> (value, 'higher'|'lower')."""
    out: dict[str, tuple[float, str]] = {}
    b = doc.get("benchmarks", {})
    for r in (b.get("model") or {}).get("rows", []):
        if r["samples_per_s"]["median"]:
            out[f"{r['workload']} {r['precision']} samples/s"] = (r["samples_per_s"]["median"], "higher")
    first = str(doc.get("device", {}).get("type", "cpu")) == "cuda" and "cuda:0" or "cpu"
    for dtype, s in ((b.get("matmul") or {}).get("summary", {}).get(first) or {}).items():
        out[f"matmul {dtype} MAMF TFLOPS"] = (s["mamf_tflops"], "higher")
    s = (b.get("membw") or {}).get("summary", {}).get(first)
    if s:
        out["memory copy GB/s"] = (s["gbps"], "higher")
    for op, s in ((b.get("collectives") or {}).get("summary") or {}).items():
        out[f"{op} busbw GB/s @ {s['max_bytes']} B"] = (s["busbw_gbps_at_max_bytes"], "higher")
    return out
