"""The doctor's report: the JSON schema (versioned) and the human rendering (rich, grouped by severity)."""

from __future__ import annotations

from rubin.doctor.findings import RANK, Finding, worst

SCHEMA_VERSION = 1
_STYLE = {"error": "bold red", "warn": "yellow", "info": "cyan", "ok": "green"}
_ORDER = ("error", "warn", "info", "ok")


def summary(findings: list[Finding]) -> dict:
    counts = {s: 0 for s in _ORDER}
    for f in findings:
        counts[f.severity] += not f.skipped
    return {"worst": worst(findings), **counts, "not_applicable": sum(bool(f.skipped) for f in findings),
            "failed_checks": sum(f.failed for f in findings)}


def build(facts, findings: list[Finding], *, n_checks: int, deep: list[Finding] | None = None, wall_s: float | None = None) -> dict:
    allf = findings + (deep or [])
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "doctor",
        "host": facts.system.hostname.get(),
        "collected_at": facts.collected_at,
        "summary": summary(allf),
        "checks_run": n_checks,
        "findings": [f.to_dict() for f in sorted(allf, key=lambda f: -RANK[f.severity])],
        "facts": facts.model_dump(mode="json"),
        "probe_s": facts.duration_s,
        "wall_s": wall_s,
    }


def unknown_facts(facts) -> list[tuple[str, str]]:
    """(dotted name, reason) of every fact the probe could not find out."""
    out = []

    def walk(obj, path):
        if isinstance(obj, dict):
            if set(obj) == {"value", "source", "unknown", "reason"}:
                if obj["unknown"]:
                    out.append((path, obj["reason"] or ""))
                elif isinstance(obj["value"], list):
                    for i, v in enumerate(obj["value"]):
                        walk(v, f"{path}[{i}]")
                return
            for k, v in obj.items():
                walk(v, f"{path}.{k}" if path else k)

    walk(facts.model_dump(mode="json"), "")
    return out


def _headline(facts) -> str:
    g = facts.gpu_list()
    gpus = f"{len(g)} x {g[0].name.get('?')}" if g else "no GPU"
    s, sw, d = facts.system, facts.software, facts.driver
    return (f"{s.hostname.get('?')}: {s.os_name.get('?')}, kernel {s.kernel.get('?')}, {s.cpu_count.get('?')} CPUs, "
            f"{(s.ram_total_bytes.get(0) or 0) / 2**30:.0f} GiB RAM; {gpus}; driver {d.driver_version.get('none')}; "
            f"torch {sw.torch_version.get('none')} (CUDA {sw.torch_cuda.get('') or 'none'})")


def render(console, facts, findings: list[Finding], *, show_ok: bool = False, wall_s: float | None = None) -> None:
    from rich.table import Table
    from rich.text import Text

    console.print(Text("rubin doctor", style="bold") + Text(f"  {_headline(facts)}"))
    table = Table(show_header=True, header_style="bold", expand=True, show_lines=True)
    table.add_column("severity", no_wrap=True, width=8)
    table.add_column("finding", ratio=2)
    table.add_column("evidence, cause and fix", ratio=3)
    shown = 0
    for sev in _ORDER:
        for f in (x for x in findings if x.severity == sev):
            if sev == "ok" and not show_ok and not f.check.startswith("deep."):  # --deep results are always shown
                continue
            body = Text()
            if f.evidence:
                body.append("evidence: ", style="bold").append(f.evidence + "\n")
            if f.cause:
                body.append("cause: ", style="bold").append(f.cause + "\n")
            for fix in f.fix:
                body.append("fix: ", style="bold green").append(fix + "\n")
            body.rstrip()  # in place
            if f.skipped:
                body.append(f"not applicable: {f.skipped}", style="dim")
            label = Text("N/A", style="dim") if f.skipped else Text(sev.upper(), style=_STYLE[sev])
            table.add_row(label, Text(f"{f.title}\n[{f.id}]"), body)
            shown += 1
    if shown:
        console.print(table)
    s = summary(findings)
    line = f"{s['error']} error(s), {s['warn']} warning(s), {s['info']} info, {s['ok']} ok"
    if s["not_applicable"]:
        line += f", {s['not_applicable']} not applicable (no NVIDIA GPU)"
    if s["failed_checks"]:
        line += f", {s['failed_checks']} check(s) failed to run"
    if wall_s is not None:
        line += f"  ({wall_s:.2f} s)"
    console.print(Text(line, style=_STYLE[s["worst"]]))
    unk = unknown_facts(facts)
    if unk:
        name, why = unk[0]
        console.print(Text(f"{len(unk)} fact(s) could not be probed here, e.g. {name}: {why}", style="dim"))
    if not show_ok and (s["ok"] or s["not_applicable"]):
        console.print(Text("(--all shows the passing checks; --json gives every fact with its source)", style="dim"))
