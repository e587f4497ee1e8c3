"""Plots next to the results file: busbw against message size, and per-GPU bars.

matplotlib is an optional extra (``pip install rubin[plot]``); without it the plot is skipped
with a notice and the results file is unaffected.
"""

from __future__ import annotations

from pathlib import Path


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write(doc: dict, path: str | Path) -> Path | None:
    """Write the figure to ``path`` (.png or .svg); ``None`` when there is nothing to plot."""
    b = doc["benchmarks"]
    coll = (b.get("collectives") or {}).get("rows") or []
    bars = []  # (label, value, unit) per device
    for dev, per in ((b.get("matmul") or {}).get("summary") or {}).items():
        for dtype, s in per.items():
            bars.append((f"{dev}\n{dtype}", s["mamf_tflops"], "matmul MAMF TFLOPS"))
    for dev, s in ((b.get("membw") or {}).get("summary") or {}).items():
        bars.append((f"{dev}\ncopy", s["gbps"], "memory copy GB/s"))
    if not coll and not bars:
        return None
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    panels = (1 if coll else 0) + len({u for _, _, u in bars})
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.5), squeeze=False)
    axes = list(axes[0])
    if coll:
        ax = axes.pop(0)
        for op in dict.fromkeys(r["op"] for r in coll):
            rows = sorted((r for r in coll if r["op"] == op), key=lambda r: r["bytes"])
            ax.errorbar([r["bytes"] for r in rows], [r["busbw_gbps"]["median"] for r in rows],
                        yerr=[[r["busbw_gbps"]["median"] - r["busbw_gbps"]["ci95"][0] for r in rows],
                              [r["busbw_gbps"]["ci95"][1] - r["busbw_gbps"]["median"] for r in rows]],
                        marker="o", capsize=2, label=op)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(f"collectives, {coll[0]['ranks']} ranks")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    for unit in dict.fromkeys(u for _, _, u in bars):
        ax = axes.pop(0)
        mine = [(lbl, v) for lbl, v, u in bars if u == unit]
        ax.bar([lbl for lbl, _ in mine], [v for _, v in mine])
        ax.set_ylabel(unit)
        ax.set_title(f"per device: {unit}")
        ax.tick_params(axis="x", labelsize=7)
    fig.suptitle(f"rubin bench: {doc['device']['name']} ({doc['created']})", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
