"""Interconnect checks: NVLink links down, GPU pairs without NVLink on an NVLink SKU, IB ports."""

from __future__ import annotations

from rubin.doctor.checks._common import gpu_label, gpus
from rubin.doctor.findings import Finding
from rubin.doctor.registry import check


def _expects_nvlink(name: str) -> bool:
    """Does the spec catalog say this SKU has NVLink (SXM/NVL parts, not PCIe cards)?"""
    try:
        from rubin.platform import specs

        spec = specs.match(name)
    except Exception:  # noqa: BLE001 - an unknown GPU simply has no expectation
        return False
    return bool(spec and spec.nvlink_gen and "PCIE" not in spec.key.upper())


@check("nvlink.down", "NVLink links up", gpu=True)
def nvlink_down(facts):
    out = []
    for g in gpus(facts):
        links = g.nvlink_up.get([])
        down = [i for i, up in enumerate(links) if not up]
        if links and down:
            sev = "error" if len(down) < len(links) or _expects_nvlink(g.name.get("")) else "warn"
            out.append(Finding("nvlink.down", "nvlink.down", sev, f"GPU {g.index}: {len(down)} of {len(links)} NVLinks are down",
                               evidence=f"{gpu_label(g)}: down links {down} ({g.nvlink_up.source})", gpu=g.index,
                               cause="a down link lowers all-reduce bandwidth or routes traffic over PCIe; often a failed link "
                                     "training (Xid 74), a bridge or baseboard fault, or the fabric not ready",
                               fix=["nvidia-smi nvlink -s -i {0}; nvidia-smi nvlink -e -i {0}".format(g.index),
                                    "reset the GPUs or reboot; if it persists, service the baseboard"]))
    return out


@check("nvlink.topology", "GPU pairs connected through NVLink", gpu=True)
def nvlink_topology(facts):
    topo = facts.interconnect.topology.get()
    if topo is None:
        return None
    names = {f"GPU{g.index}": g.name.get("") for g in gpus(facts)}
    pcie = []
    tg = topo.gpus()
    for i, a in enumerate(tg):
        for b in tg[i + 1:]:
            link = topo.links.get(a, {}).get(b, "")
            if link and not link.startswith("NV") and _expects_nvlink(names.get(a, "")):
                pcie.append(f"{a}-{b}: {link}")
    if not pcie:
        return None
    return Finding("nvlink.topology", "nvlink.topology", "error", f"{len(pcie)} GPU pair(s) talk over PCIe/SYS on an NVLink system",
                   evidence=f"{'; '.join(pcie[:8])} (nvidia-smi topo -m); GPU model {next(iter(names.values()), '?')}",
                   cause="this SKU has NVLink between every GPU pair; a PIX/PXB/PHB/NODE/SYS entry means the link or NVSwitch "
                         "path is down (fabric manager, bad link), so collectives run at PCIe speed",
                   fix=["systemctl status nvidia-fabricmanager", "nvidia-smi nvlink -s", "reboot; if it persists, service the node"])


@check("ib.ports", "InfiniBand ports active")
def ib_ports(facts):
    ports = facts.interconnect.ib_ports.get([])
    down = [p for p in ports if p.state.upper() != "ACTIVE"]
    if not down:
        return None
    ib = [p for p in ports if p.link_layer == "InfiniBand"]
    sev = "error" if len(down) == len(ports) or any(p.link_layer == "InfiniBand" for p in down) else "warn"
    return Finding("ib.ports", "ib.ports", sev, f"{len(down)} of {len(ports)} RDMA port(s) are not ACTIVE",
                   evidence="; ".join(f"{p.device}/{p.port}: {p.state} ({p.phys_state}), {p.link_layer}, {p.rate}" for p in down[:8])
                            + f" (/sys/class/infiniband); {len(ib)} InfiniBand port(s) in total",
                   cause="NCCL skips or fails on ports that are not ACTIVE: multi-node traffic falls back to TCP sockets (10-100x "
                         "slower) or hangs. DOWN/Polling = no link (cable, switch port); INIT = no subnet manager (opensm/UFM)",
                   fix=["ibstat; ibv_devinfo", "INIT: start the subnet manager (`sudo systemctl start opensm`) or check UFM",
                        "DOWN: check the cable and switch port", "exclude bad ports: NCCL_IB_HCA=^mlx5_<n>"])


_NEAR = ("PIX", "PXB")  # a GPU and a NIC under the same PCIe switch: GPUDirect RDMA at full speed


@check("nic.gpu_affinity", "every GPU has a nearby NIC", gpu=True)
def gpu_nic_affinity(facts):
    topo = facts.interconnect.topology.get()
    if topo is None:
        return None
    nics = [d for d in topo.devices if not d.startswith("GPU")]
    if not nics or len(nics) < len(topo.gpus()):
        return None  # fewer NICs than GPUs: a shared-NIC design where distance is expected
    far = [g for g in topo.gpus() if not any(topo.links.get(g, {}).get(n, "") in _NEAR for n in nics)]
    if not far:
        return None
    best = {g: sorted({topo.links.get(g, {}).get(n, "?") for n in nics}) for g in far}
    return Finding("nic.gpu_affinity", "nic.gpu_affinity", "warn", f"{len(far)} GPU(s) have no NIC under their PCIe switch",
                   evidence="; ".join(f"{g}: NICs at {', '.join(v)}" for g, v in list(best.items())[:8]) + " (nvidia-smi topo -m)",
                   cause="with one NIC per GPU, each GPU should share a PCIe switch (PIX/PXB) with its NIC; across the host bridge or "
                         "the CPU interconnect (PHB/NODE/SYS) GPUDirect RDMA is slow or disabled and inter-node all-reduce drops",
                   fix=["check the NIC/GPU slot layout against the vendor's reference topology",
                        "NCCL_DEBUG=INFO shows 'GPU Direct RDMA Disabled' when this bites", "NCCL_NET_GDR_LEVEL=SYS forces GDR (test it)"])
