"""Xid checks: known NVIDIA Xid codes in the kernel log, with their meaning and action (data/xid.yaml)."""

from __future__ import annotations

from collections import defaultdict

from rubin.doctor.checks._common import data
from rubin.doctor.findings import Finding
from rubin.doctor.registry import check

RECENT_S = 24 * 3600  # older events are history: reported one level lower


@check("xid.events", "Xid errors in the kernel log", gpu=True)
def xid_events(facts):
    events = facts.environment.xid_events.get([])
    table = data("xid.yaml")["xids"]
    by_code = defaultdict(list)
    for e in events:
        by_code[e.code].append(e)
    out = []
    for code, evs in sorted(by_code.items()):
        row = table.get(code)
        sev = row["severity"] if row else "warn"
        recent = any(e.age_s is None or e.age_s < RECENT_S for e in evs)
        if not recent:
            sev = {"error": "warn", "warn": "info"}.get(sev, sev)
        pcis = sorted({e.pci for e in evs if e.pci})
        out.append(Finding(f"xid.{code}", "xid.events", sev,
                           f"Xid {code} x{len(evs)}: {row['meaning'] if row else 'not in rubin’s Xid table'}",
                           evidence=f"{evs[-1].text} ({facts.environment.xid_events.source}); PCI {', '.join(pcis) or '?'}"
                                    + ("" if recent else "; all older than 24 h"),
                           cause=(row["meaning"] + f" [{row['source']}]") if row else "an Xid the table does not list",
                           fix=[row["action"]] if row else ["look it up in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors)"]))
    return out
