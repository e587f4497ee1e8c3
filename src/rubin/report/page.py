"""Assemble sections into one self-contained HTML page (inline SVG, inline CSS, no scripts, no network)
or into Markdown with the figures as SVG files beside it."""

from __future__ import annotations

import datetime as dt
from html import escape
from pathlib import Path

from rubin.report import profile_section, run_sections, sections
from rubin.report.inputs import detect

BUILDERS = {"env": sections.env, "doctor": sections.doctor, "doctor-checks": sections.doctor_checks, "bench": sections.bench,
            "compare": sections.compare, "plan-memory": sections.plan_memory, "plan-cost": sections.plan_cost,
            "plan-project": sections.plan_other, "plan-advise": sections.plan_other, "run": run_sections.run,
            "verify": run_sections.verify, "certificate": sections.certificate, "profile": profile_section.build}
# Sections appear in the order a reader asks: is the machine healthy, how fast, does it converge, what will it cost.
ORDER = ("certificate", "verify", "env", "doctor", "doctor-checks", "bench", "compare", "run", "profile", "plan-memory", "plan-cost",
         "plan-project", "plan-advise")

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;max-width:1000px;padding:16px 24px;color:#1a1a1a;
line-height:1.45}
h1{font-size:1.6em;margin:.2em 0}h2{font-size:1.25em;border-bottom:2px solid #ddd;padding-bottom:4px;margin-top:2em}
.meta,.src{color:#666;font-size:.85em}table{border-collapse:collapse;margin:.6em 0;font-size:.88em;width:100%}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f4f4f4}
tr:nth-child(even) td{background:#fafafa}figure{margin:1em 0;padding:8px;border:1px solid #eee;display:inline-block;max-width:100%}
figure svg{max-width:100%;height:auto}figcaption{font-size:.85em;color:#444;margin-top:4px}
.verdict{padding:8px 12px;border-radius:4px;margin:.6em 0;font-weight:600}.pass{background:#e6f4ea;color:#14532d}
.fail{background:#fde8e8;color:#7f1d1d}.inconclusive{background:#fff7e0;color:#713f12}nav a{margin-right:12px}
"""


def collect(inputs) -> list[sections.Section]:
    found = [(detect(p), str(p)) for p in inputs]
    found += profile_section.extra(found)  # a profiled run dir also gets its profile section
    found.sort(key=lambda item: ORDER.index(item[0][0]))
    return [BUILDERS[kind](data, src) for (kind, data), src in found]


def _anchor(i: int, s: sections.Section) -> str:
    return f"sec-{i}-{s.kind}"


def html(secs: list[sections.Section], title: str = "rubin report") -> str:
    from rubin import __version__

    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
           "<meta name='viewport' content='width=device-width, initial-scale=1'>",
           # No network: nothing here may load; the policy makes a stray URL fail closed.
           "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">",
           f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
           f"<h1>{escape(title)}</h1><p class='meta'>written by rubin {escape(__version__)} at {now}; {len(secs)} input(s)</p>",
           "<nav>" + "".join(f"<a href='#{_anchor(i, s)}'>{escape(s.title.split(':')[0])}</a>" for i, s in enumerate(secs)) + "</nav>"]
    fig_no = 0
    for i, s in enumerate(secs):
        out.append(f"<section id='{_anchor(i, s)}' class='section' data-kind='{s.kind}'><h2>{escape(s.title)}</h2>"
                   f"<p class='src'>from {escape(s.source)}</p>")
        for b in s.blocks:
            if b[0] == "p":
                out.append(f"<p>{escape(b[1])}</p>")
            elif b[0] == "verdict":
                out.append(f"<div class='verdict {b[1]}'>{escape(b[2])}</div>")
            elif b[0] == "table":
                head = "".join(f"<th>{escape(h)}</th>" for h in b[1])
                body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in b[2])
                out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
            else:
                fig_no += 1
                out.append(f"<figure id='fig-{fig_no}' class='fig'>{b[2]}<figcaption>Figure {fig_no}. {escape(b[1])}</figcaption></figure>")
        out.append("</section>")
    out.append("</body></html>")
    return "\n".join(out)


def _md_cell(c: str) -> str:
    return c.replace("|", "\\|").replace("\n", " ")


def markdown(secs: list[sections.Section], out: Path, title: str = "rubin report") -> list[Path]:
    """Write ``out`` (.md) and its figures into ``<out stem>_files/``; return every path written."""
    fig_dir = out.with_name(out.stem + "_files")
    written, lines, fig_no = [], [f"# {title}", ""], 0
    for s in secs:
        lines += [f"## {s.title}", "", f"_from {s.source}_", ""]
        for b in s.blocks:
            if b[0] == "p":
                lines += [b[1], ""]
            elif b[0] == "verdict":
                text = b[2].removeprefix(f"{b[1].upper()}: ")  # the level is in bold already
                lines += [f"**{b[1].upper()}**: {text}", ""]
            elif b[0] == "table":
                lines += ["| " + " | ".join(map(_md_cell, b[1])) + " |", "|" + "---|" * len(b[1])]
                lines += ["| " + " | ".join(map(_md_cell, r)) + " |" for r in b[2]] + [""]
            else:
                fig_no += 1
                fig_dir.mkdir(parents=True, exist_ok=True)
                p = fig_dir / f"fig-{fig_no}.svg"
                p.write_text(b[2])
                written.append(p)
                lines += [f"![Figure {fig_no}. {b[1]}]({fig_dir.name}/{p.name})", ""]
    out.write_text("\n".join(lines))
    return [out, *written]


def write(inputs, out, fmt: str = "html", title: str = "rubin report") -> list[Path]:
    secs = collect(inputs)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "md":
        return markdown(secs, out, title)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(html(secs, title), encoding="utf-8")
    tmp.replace(out)
    return [out]
