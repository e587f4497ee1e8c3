"""``rubin env``: the fingerprint plus the slower details (torch's CUDA view, toolkit, compilers,
topology, InfiniBand), as a dict and as markdown to paste into an issue. A superset of
``torch.utils.collect_env``: it adds NCCL, NVML per-GPU state, topology, IB and the scheduler."""

from __future__ import annotations

import platform

from rubin.platform.fingerprint import fingerprint


def _first_line(runner, argv) -> str | None:
    res = runner.run(argv, timeout=5)
    return res.output.splitlines()[0].strip() if res.ok and res.output else None


def full_env(run_dir: str | None = None, *, quick: bool = False) -> dict:
    from rubin.platform import commands
    from rubin.platform.probe import probe
    from rubin.platform.sources import Sources

    fp = fingerprint(run_dir)
    fp["launcher"] = launcher_info()
    if quick:
        return fp
    facts = probe(Sources(run_dir=run_dir or "."))
    sw, inter, drv = facts.software, facts.interconnect, facts.driver
    run = commands.get()
    topo = inter.topology.get()
    fp["extra"] = {
        "torch_cuda_available": sw.torch_cuda_available.get(),
        "torch_device_count": sw.torch_device_count.get(),
        "torch_arch_list": sw.arch_list.get(),
        "cudnn": sw.cudnn_version.get(),
        "nccl": sw.nccl_version.get(),
        "nvcc": sw.nvcc_version.get(),
        "nvcc_path": sw.nvcc_path.get() or None,
        "gcc": _first_line(run, ["gcc", "--version"]),
        "clang": _first_line(run, ["clang", "--version"]),
        "cmake": _first_line(run, ["cmake", "--version"]),
        "libc": " ".join(platform.libc_ver()).strip() or None,
        "kernel_module": drv.module_version.get(),
        "nvidia_smi": (drv.nvidia_smi.value.output.splitlines() or [None])[0] if drv.nvidia_smi.known else None,
        "persistence_mode": [g.persistence_mode.get() for g in facts.gpu_list()],
        "mig": [g.mig_enabled.get() for g in facts.gpu_list()],
        "pcie": [f"Gen{g.pcie_gen.get('?')} x{g.pcie_width.get('?')}" for g in facts.gpu_list()],
        "nvlinks_up": [sum(g.nvlink_up.get([])) for g in facts.gpu_list()],
        "topology": topo.links if topo else None,
        "ib_ports": [p.model_dump() for p in inter.ib_ports.get([])],
        "net_interfaces": inter.net_interfaces.get(),
        "numa_nodes": facts.system.numa_nodes.get(),
        "shm_bytes": facts.system.shm_total_bytes.get(),
        "memlock_bytes": facts.system.memlock_soft_bytes.get(),
    }
    return fp


def launcher_info(env=None) -> dict:
    """The launcher this process was started by (torchrun, Slurm, PyTorchJob, SkyPilot, ...) and its rank."""
    from rubin.errors import UsageError
    from rubin.platform.launcher import describe, detect

    try:
        return describe(detect(env))
    except UsageError as err:  # a broken launcher environment is a finding here, not a crash
        return {"launcher": "invalid", "error": str(err)}


def markdown(env: dict) -> str:
    lines = ["## Environment (`rubin env`)", ""]

    def section(title, d):
        lines.append(f"**{title}**")
        lines.append("")
        for k, v in d.items():
            if isinstance(v, dict) and v and k == "topology":
                cols = list(next(iter(v.values())).keys())
                lines.append("- topology:")
                lines.append("")
                lines.append("  | | " + " | ".join(cols) + " |")
                lines.append("  |---|" + "---|" * len(cols))
                for row, cells in v.items():
                    lines.append(f"  | {row} | " + " | ".join(cells.get(c, "") for c in cols) + " |")
                lines.append("")
                continue
            if v in (None, [], {}, ""):
                v = "–"
            elif isinstance(v, list):
                v = ", ".join(str(x) for x in v)
            elif isinstance(v, dict):
                v = ", ".join(f"{a}={b}" for a, b in v.items())
            lines.append(f"- {k}: `{v}`" if v != "–" else f"- {k}: –")
        lines.append("")

    for key in ("host", "python", "rubin", "torch", "gpu", "scheduler", "launcher", "run_dir", "extra"):
        if key in env:
            section(key, env[key])
    section("env", env.get("env") or {"(none of the GPU/NCCL/launcher variables are set)": None})
    section("packages", env.get("packages", {}))
    lines.append(f"<sub>fingerprint schema {env['schema_version']}, collected {env['collected_at']}</sub>")
    return "\n".join(lines)
