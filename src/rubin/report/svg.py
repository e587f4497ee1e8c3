"""Figures as inline SVG, written directly: no plotting library, no network, crisp at any zoom.

Three shapes cover the report: lines (with optional min-max bands and a log2 x axis), bars with
error whiskers, and stacked bars. Text is escaped; sizes are in CSS pixels.
"""

from __future__ import annotations

import math
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
W, H = 640, 300
LEG = 190  # width of the legend column, right of the plot (a legend inside would hide data)
ML, MR, MT, MB = 64, 16, 30, 44  # margins: left (y labels), right, top (title), bottom (x labels)


def ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values covering [lo, hi]."""
    if not math.isfinite(lo) or not math.isfinite(hi):
        return []
    if hi == lo:
        hi, lo = hi + (abs(hi) or 1) * 0.5, lo - (abs(lo) or 1) * 0.5
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    out, v = [], first
    while v <= hi + step * 1e-9:
        out.append(round(v, 12))
        v += step
    return out


def label(v: float) -> str:
    a = abs(v)
    if a >= 1e9:
        return f"{v / 1e9:g}G"
    if a >= 1e6:
        return f"{v / 1e6:g}M"
    if a >= 1e4:
        return f"{v / 1e3:g}k"
    return f"{v:.4g}"


def bytes_label(v: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if v >= size:
            return f"{v / size:g}{unit}"
    return f"{v:g}B"


class Axes:
    def __init__(self, xlo, xhi, ylo, yhi, *, logx=False, w=W, h=H):
        self.logx, self.w, self.h = logx, w, h
        f = (lambda x: math.log2(x)) if logx else (lambda x: x)
        self.fx = f
        self.x0, self.x1 = f(xlo), f(xhi)
        if self.x1 == self.x0:
            self.x0, self.x1 = self.x0 - 1, self.x1 + 1
        pad = (yhi - ylo) * 0.05 or (abs(yhi) or 1) * 0.1
        self.yt = ticks(ylo - pad, yhi + pad)
        self.y0, self.y1 = min(self.yt[0], ylo), max(self.yt[-1], yhi)

    def px(self, x):
        return ML + (self.fx(x) - self.x0) / (self.x1 - self.x0) * (self.w - ML - MR)

    def py(self, y):
        return self.h - MB - (y - self.y0) / (self.y1 - self.y0) * (self.h - MT - MB)


def _frame(ax: Axes, title: str, xlabel: str, ylabel: str, xticks: list[tuple[float, str]]) -> list[str]:
    w, h = ax.w, ax.h
    out = [f'<rect x="0" y="0" width="{w}" height="{h}" fill="#fff"/>',
           f'<text x="{w / 2}" y="18" text-anchor="middle" font-size="14" font-weight="600">{escape(title)}</text>']
    for y in ax.yt:
        py = ax.py(y)
        out.append(f'<line x1="{ML}" x2="{w - MR}" y1="{py:.1f}" y2="{py:.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{ML - 6}" y="{py + 4:.1f}" text-anchor="end" font-size="11">{escape(label(y))}</text>')
    for x, text in xticks:
        px = ax.px(x)
        out.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{h - MB}" y2="{h - MB + 4}" stroke="#555"/>')
        out.append(f'<text x="{px:.1f}" y="{h - MB + 16}" text-anchor="middle" font-size="11">{escape(text)}</text>')
    out.append(f'<line x1="{ML}" x2="{w - MR}" y1="{h - MB}" y2="{h - MB}" stroke="#555"/>')
    out.append(f'<line x1="{ML}" x2="{ML}" y1="{MT}" y2="{h - MB}" stroke="#555"/>')
    out.append(f'<text x="{(ML + w - MR) / 2}" y="{h - 6}" text-anchor="middle" font-size="12">{escape(xlabel)}</text>')
    out.append(f'<text x="14" y="{(MT + h - MB) / 2}" text-anchor="middle" font-size="12" '
               f'transform="rotate(-90 14 {(MT + h - MB) / 2})">{escape(ylabel)}</text>')
    return out


def _svg(body: list[str], w=W, h=H) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" '
            f'font-family="sans-serif" role="img">' + "".join(body) + "</svg>")


def _legend(items: list[tuple[str, str, str]], w=W) -> list[str]:
    """items: (label, color, kind line|band); drawn in the column right of the plot."""
    out, y = [], MT + 6
    for text, color, kind in items:
        x = w + 4
        if kind == "band":
            out.append(f'<rect x="{x}" y="{y - 6}" width="18" height="10" fill="{color}" fill-opacity="0.25"/>')
        else:
            out.append(f'<line x1="{x}" x2="{x + 18}" y1="{y - 1}" y2="{y - 1}" stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{x + 24}" y="{y + 3}" font-size="11">{escape(text[:30])}</text>')
        y += 15
    return out


def lines(series: list[dict], *, title: str, xlabel: str, ylabel: str, bands: list[dict] = (), logx: bool = False,
          xfmt=label) -> str:
    """series: {label, xs, ys, color?, width?, dash?}; bands: {label, xs, lo, hi, color?} drawn under the lines."""
    pts = [(x, y) for s in series for x, y in zip(s["xs"], s["ys"]) if _ok(x, y)]
    pts += [(x, y) for b in bands for x, lo, hi in zip(b["xs"], b["lo"], b["hi"]) for y in (lo, hi) if _ok(x, y)]
    if logx:
        pts = [(x, y) for x, y in pts if x > 0]
    if not pts:
        return ""
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    ax = Axes(min(xs), max(xs), min(ys), max(ys), logx=logx)
    if logx:
        lo, hi = math.floor(math.log2(min(xs))), math.ceil(math.log2(max(xs)))
        stride = max(1, (hi - lo) // 8)
        xt = [(2.0 ** e, xfmt(2.0 ** e)) for e in range(lo, hi + 1, stride)]
    else:
        xt = [(t, xfmt(t)) for t in ticks(min(xs), max(xs), 6) if min(xs) <= t <= max(xs)]
    body = _frame(ax, title, xlabel, ylabel, xt)
    legend = []
    for i, b in enumerate(bands):
        color = b.get("color") or PALETTE[i % len(PALETTE)]
        ok = [(x, lo, hi) for x, lo, hi in zip(b["xs"], b["lo"], b["hi"]) if _ok(x, lo) and _ok(x, hi)]
        if ok:
            top = " ".join(f"{ax.px(x):.1f},{ax.py(hi):.1f}" for x, _, hi in ok)
            bot = " ".join(f"{ax.px(x):.1f},{ax.py(lo):.1f}" for x, lo, _ in reversed(ok))
            body.append(f'<polygon points="{top} {bot}" fill="{color}" fill-opacity="0.22" stroke="none"/>')
            if b.get("label"):
                legend.append((b["label"], color, "band"))
    for i, s in enumerate(series):
        color = s.get("color") or PALETTE[i % len(PALETTE)]
        ok = [(x, y) for x, y in zip(s["xs"], s["ys"]) if _ok(x, y) and (x > 0 or not logx)]
        if not ok:
            continue
        dash = f' stroke-dasharray="{s["dash"]}"' if s.get("dash") else ""
        path = " ".join(f"{ax.px(x):.1f},{ax.py(y):.1f}" for x, y in ok)
        body.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="{s.get("width", 2)}"'
                    f' stroke-opacity="{s.get("opacity", 1)}"{dash}/>')
        if s.get("markers"):
            body += [f'<circle cx="{ax.px(x):.1f}" cy="{ax.py(y):.1f}" r="3" fill="{color}"/>' for x, y in ok]
        if s.get("label"):
            legend.append((s["label"], color, "line"))
    if not legend:
        return _svg(body)
    return _svg(body + _legend(legend), W + LEG, max(H, MT + 15 * len(legend) + 20))


def bars(items: list[dict], *, title: str, ylabel: str, ref: tuple[float, str] | None = None) -> str:
    """items: {label, value, lo?, hi?, color?}; whiskers from lo to hi; ``ref`` draws a dashed line (value, text)."""
    items = [b for b in items if _ok(0, b["value"])]
    if not items:
        return ""
    top = max([b.get("hi") or b["value"] for b in items] + [ref[0] if ref else 0]) * 1.12  # room for the value labels
    ax = Axes(0, len(items), min(0, min(b["value"] for b in items)), top)
    body = _frame(ax, title, "", ylabel, [])
    slot = (W - ML - MR) / len(items)
    for i, b in enumerate(items):
        bw = min(slot * 0.7, 90)
        x = ML + i * slot + (slot - bw) / 2
        y0, y1 = ax.py(0), ax.py(b["value"])
        color = b.get("color") or PALETTE[0]
        body.append(f'<rect x="{x:.1f}" y="{min(y0, y1):.1f}" width="{bw:.1f}" height="{abs(y0 - y1):.1f}" fill="{color}"/>')
        if b.get("lo") is not None and b.get("hi") is not None:
            cx = x + bw / 2
            body.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{ax.py(b["lo"]):.1f}" y2="{ax.py(b["hi"]):.1f}" stroke="#222"/>')
            for yy in (b["lo"], b["hi"]):
                body.append(f'<line x1="{cx - 5:.1f}" x2="{cx + 5:.1f}" y1="{ax.py(yy):.1f}" y2="{ax.py(yy):.1f}" stroke="#222"/>')
        body.append(f'<text x="{x + bw / 2:.1f}" y="{min(y0, y1) - 4:.1f}" text-anchor="middle" font-size="10">'
                    f'{escape(label(b["value"]))}</text>')
        body.append(f'<text x="{x + bw / 2:.1f}" y="{H - MB + 16}" text-anchor="middle" font-size="10">{escape(b["label"][:22])}</text>')
    if ref:
        y = ax.py(ref[0])
        body.append(f'<line x1="{ML}" x2="{W - MR}" y1="{y:.1f}" y2="{y:.1f}" stroke="#d62728" stroke-dasharray="6 4"/>')
        body.append(f'<text x="{W - MR - 4}" y="{y - 4:.1f}" text-anchor="end" font-size="11" fill="#d62728">{escape(ref[1])}</text>')
    return _svg(body)


def stacked(rows: list[tuple[str, dict]], parts: list[str], *, title: str, ylabel: str = "share of step time") -> str:
    """One horizontal 100% bar per row (label, {part: share}), parts in fixed colors, with a legend."""
    rows = [(lbl, d) for lbl, d in rows if sum(v or 0 for v in d.values()) > 0]
    if not rows:
        return ""
    h = MT + 28 * len(rows) + 46
    body = [f'<rect x="0" y="0" width="{W}" height="{h}" fill="#fff"/>',
            f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="14" font-weight="600">{escape(title)}</text>']
    left, width = 150, W - 150 - MR
    for i, (lbl, d) in enumerate(rows):
        y, x = MT + 28 * i, left
        total = sum(v or 0 for v in d.values())
        body.append(f'<text x="{left - 6}" y="{y + 15}" text-anchor="end" font-size="11">{escape(lbl[:24])}</text>')
        for j, p in enumerate(parts):
            share = (d.get(p) or 0) / total
            body.append(f'<rect x="{x:.1f}" y="{y}" width="{share * width:.1f}" height="20" fill="{PALETTE[j]}"/>')
            if share > 0.08:
                body.append(f'<text x="{x + share * width / 2:.1f}" y="{y + 14}" text-anchor="middle" font-size="10" '
                            f'fill="#fff">{100 * share:.0f}%</text>')
            x += share * width
    ly = MT + 28 * len(rows) + 14
    for j, p in enumerate(parts):
        x = left + j * 130
        body.append(f'<rect x="{x}" y="{ly}" width="12" height="12" fill="{PALETTE[j]}"/>')
        body.append(f'<text x="{x + 16}" y="{ly + 10}" font-size="11">{escape(p)}</text>')
    body.append(f'<text x="{W / 2}" y="{h - 4}" text-anchor="middle" font-size="11">{escape(ylabel)}</text>')
    return _svg(body, W, h)


def _ok(x, y) -> bool:
    return isinstance(x, (int, float)) and isinstance(y, (int, float)) and math.isfinite(x) and math.isfinite(y)
