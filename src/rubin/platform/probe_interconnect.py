"""Interconnect facts: the GPU/NIC topology matrix (``nvidia-smi topo -m``), InfiniBand ports
(``/sys/class/infiniband``) and network interfaces (``/sys/class/net``, for NCCL_SOCKET_IFNAME)."""

from __future__ import annotations

import re

from rubin.platform.facts import IbPort, InterconnectFacts, Topology, unknown
from rubin.platform.sources import Sources, guarded

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_DEVICE = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\d+|mlx5_\w+)$")


def parse_topology(text: str) -> Topology:
    """Parse the matrix that ``nvidia-smi topo -m`` prints (any driver from 450 on)."""
    lines = [_ANSI.sub("", line.rstrip()) for line in text.splitlines()]
    # The header row is indented (its first cell is empty); data rows start with their device name.
    header_at = next((i for i, line in enumerate(lines) if line[:1].isspace() and line.split()[:1] == ["GPU0"]), None)
    if header_at is None:
        raise ValueError("no topology header (a line of GPU0 GPU1 ... columns)")
    devices = [t for t in lines[header_at].split() if _DEVICE.match(t)]
    links: dict[str, dict[str, str]] = {}
    cpu, numa, nics = {}, {}, {}
    for line in lines[header_at + 1:]:
        tokens = line.split()
        if not tokens or not _DEVICE.match(tokens[0]):
            m = re.match(r"\s*(NIC\d+):\s*(\S+)", line)
            if m:
                nics[m.group(1)] = m.group(2)
            continue
        name, cells = tokens[0], tokens[1:]
        if len(cells) < len(devices):
            raise ValueError(f"row {name} has {len(cells)} cells for {len(devices)} columns")
        links[name] = dict(zip(devices, cells[: len(devices)]))
        rest = cells[len(devices):]
        if name.startswith("GPU") and rest:
            cpu[name] = rest[0]
            if len(rest) > 1:
                numa[name] = rest[1]
    if not links:
        raise ValueError("topology header without rows")
    return Topology(devices=devices, links=links, cpu_affinity=cpu, numa_affinity=numa, nic_names=nics)


def _strip_num(text: str) -> str:
    """sysfs "4: ACTIVE" -> "ACTIVE"."""
    return text.split(":", 1)[1].strip() if ":" in text else text.strip()


def ib_ports(src: Sources) -> list[IbPort]:
    base = "sys/class/infiniband"
    if not src.exists(base):
        return []
    out = []
    for dev in src.listdir(base):
        for port in src.listdir(f"{base}/{dev}/ports"):
            p = f"{base}/{dev}/ports/{port}"
            read = lambda name: src.read(f"{p}/{name}").strip() if src.exists(f"{p}/{name}") else ""  # noqa: E731
            out.append(IbPort(
                device=dev, port=int(port), state=_strip_num(read("state")), phys_state=_strip_num(read("phys_state")),
                rate=read("rate"), link_layer=read("link_layer") or "InfiniBand",
            ))
    return out


def probe(src: Sources, *, want_topology: bool = True) -> InterconnectFacts:
    f = InterconnectFacts()
    if want_topology:
        res = src.run(["nvidia-smi", "topo", "-m"])
        if res.ok:
            f.topology = guarded("nvidia-smi topo -m", lambda: parse_topology(res.stdout))
        else:
            f.topology = unknown(res.reason(), "nvidia-smi topo -m")
    else:
        f.topology = unknown("no GPUs visible through NVML", "nvidia-smi topo -m")
    f.ib_ports = guarded("/sys/class/infiniband/*/ports/*", lambda: ib_ports(src))
    f.net_interfaces = guarded("/sys/class/net", lambda: src.listdir("sys/class/net"))
    return f
