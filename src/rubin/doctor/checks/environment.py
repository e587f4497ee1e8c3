"""Environment-variable checks: CUDA_VISIBLE_DEVICES, NCCL switches, OMP threads, allocator config,
launcher variables, CUDA_LAUNCH_BLOCKING."""

from __future__ import annotations

import re

from rubin.doctor.checks._common import gpus
from rubin.doctor.findings import Finding
from rubin.doctor.registry import check

_TRUE = {"1", "true", "yes", "on"}
_ALLOC_KEYS = {"max_split_size_mb", "roundup_power2_divisions", "roundup_bypass_threshold_mb", "garbage_collection_threshold",
               "expandable_segments", "pinned_use_cuda_host_register", "pinned_num_register_threads", "pinned_use_background_threads",
               "release_lock_on_cudamalloc", "backend", "per_process_memory_fraction", "graph_capture_record_stream_reuse",
               "pinned_reserve_segment_size_mb"}


def _env(facts) -> dict:
    return facts.environment.variables.get({}) or {}


@check("env.cuda_visible_devices", "CUDA_VISIBLE_DEVICES names existing GPUs", gpu=True)
def cuda_visible_devices(facts):
    env = _env(facts)
    if "CUDA_VISIBLE_DEVICES" not in env or not facts.gpus.known:
        return None
    raw = env["CUDA_VISIBLE_DEVICES"]
    n = len(gpus(facts))
    uuids = {g.uuid.get("") for g in gpus(facts)}
    items = [x.strip() for x in raw.split(",")] if raw.strip() else []
    bad = []
    for x in items:
        if re.fullmatch(r"-?\d+", x):
            if not 0 <= int(x) < n:
                bad.append(x)
        elif x.startswith(("GPU-", "MIG-")):
            if x.startswith("GPU-") and not any(u.startswith(x) for u in uuids):
                bad.append(x)
        else:
            bad.append(x)
    if items and not bad and len(set(items)) == len(items):
        return None
    why = ("is empty, which hides every GPU" if not items
           else f"names {bad} but this machine has GPUs 0..{n - 1}" if bad else "repeats a device")
    return Finding("env.cuda_visible_devices", "env.cuda_visible_devices", "error", f"CUDA_VISIBLE_DEVICES={raw!r} {why}",
                   evidence=f"CUDA_VISIBLE_DEVICES={raw!r}; NVML GPUs: {n}",
                   cause="CUDA stops at the first invalid entry: the GPUs after it (or all) disappear and torch reports 0 devices "
                         "or 'invalid device ordinal'",
                   fix=[f"export CUDA_VISIBLE_DEVICES={','.join(str(i) for i in range(n))}   # or unset it" if n
                        else "unset CUDA_VISIBLE_DEVICES"])


@check("env.nccl_p2p_disable", "NCCL_P2P_DISABLE not set", gpu=True)
def nccl_p2p(facts):
    v = _env(facts).get("NCCL_P2P_DISABLE")
    if v is None or v.strip().lower() not in _TRUE:
        return None
    return Finding("env.nccl_p2p_disable", "env.nccl_p2p_disable", "warn", "NCCL_P2P_DISABLE=1 turns off NVLink/PCIe peer-to-peer",
                   evidence=f"NCCL_P2P_DISABLE={v}", cause="a common forum workaround for hangs on consumer GPUs; on NVLink systems "
                   "it sends intra-node traffic through host memory, several times slower",
                   fix=["unset NCCL_P2P_DISABLE, and fix the hang's cause (IOMMU/ACS: `NCCL_P2P_LEVEL=NVL`, driver update)"])


@check("env.nccl_ib_disable", "NCCL_IB_DISABLE not set with InfiniBand present")
def nccl_ib(facts):
    v = _env(facts).get("NCCL_IB_DISABLE")
    active = [p for p in facts.interconnect.ib_ports.get([]) if p.state.upper() == "ACTIVE"]
    if v is None or v.strip().lower() not in _TRUE:
        return None
    sev = "warn" if active else "info"
    return Finding("env.nccl_ib_disable", "env.nccl_ib_disable", sev, "NCCL_IB_DISABLE=1: NCCL will not use InfiniBand/RoCE",
                   evidence=f"NCCL_IB_DISABLE={v}; ACTIVE RDMA ports: {len(active)}",
                   cause="multi-node collectives fall back to TCP sockets" + (" although IB ports are ACTIVE here" if active else ""),
                   fix=["unset NCCL_IB_DISABLE; select ports with NCCL_IB_HCA instead"])


def ifname_matches(spec: str, interfaces: list[str]) -> list[str]:
    """Entries of an NCCL_SOCKET_IFNAME spec that match no interface ('^' excludes, '=' is exact)."""
    body = spec.strip()
    if body.startswith("^"):
        return []  # an exclude list cannot name a missing interface in a harmful way
    exact = body.startswith("=")
    body = body.lstrip("=")
    missing = []
    for item in filter(None, (x.strip() for x in body.split(","))):
        if not any((i == item) if exact else i.startswith(item) for i in interfaces):
            missing.append(item)
    return missing


@check("env.nccl_socket_ifname", "NCCL_SOCKET_IFNAME names an existing interface")
def nccl_socket_ifname(facts):
    env = _env(facts)
    ifaces = facts.interconnect.net_interfaces.get()
    out = []
    for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        if var not in env or ifaces is None:
            continue
        missing = ifname_matches(env[var], ifaces)
        if missing and len(missing) == len([x for x in env[var].lstrip("=").split(",") if x.strip()]):
            out.append(Finding(f"env.nccl_socket_ifname.{var.split('_')[0].lower()}", "env.nccl_socket_ifname", "error",
                               f"{var}={env[var]!r} matches no network interface here",
                               evidence=f"{var}={env[var]!r}; interfaces: {ifaces} (/sys/class/net)",
                               cause="NCCL/gloo cannot bootstrap: 'no socket interface found' or 'Bootstrap : no socket interface "
                                     "found', then a timeout. Interface names differ between VM sizes and containers (eth0, ens*, ib0)",
                               fix=[f"export {var}={next((i for i in ifaces if i != 'lo'), 'eth0')}   # or a prefix like 'eth'",
                                    "or unset it and let NCCL choose"]))
    return out


@check("env.omp_threads", "OMP_NUM_THREADS")
def omp_threads(facts):
    env = _env(facts)
    cpus = facts.system.cpu_count.get()
    procs = int(env.get("LOCAL_WORLD_SIZE") or 0) or len(gpus(facts)) or 1
    raw = env.get("OMP_NUM_THREADS")
    if raw is None:
        if procs <= 1:
            return None
        return Finding("env.omp_threads.unset", "env.omp_threads", "info", "OMP_NUM_THREADS is not set",
                       evidence=f"OMP_NUM_THREADS unset; {cpus} CPUs; {procs} processes per node expected",
                       cause="torchrun sets OMP_NUM_THREADS=1 for multi-process runs (and warns); other launchers do not, and "
                             "each rank then starts one thread per core, oversubscribing the CPUs",
                       fix=[f"export OMP_NUM_THREADS={max((cpus or procs) // procs, 1)}   # CPUs / processes per node"])
    if not raw.isdigit() or int(raw) < 1:
        return Finding("env.omp_threads.invalid", "env.omp_threads", "warn", f"OMP_NUM_THREADS={raw!r} is not a positive integer",
                       evidence=f"OMP_NUM_THREADS={raw!r}", cause="OpenMP ignores it and uses every core",
                       fix=["export OMP_NUM_THREADS=<CPUs per process>"])
    if cpus and int(raw) * procs > cpus:
        return Finding("env.omp_threads.oversubscribed", "env.omp_threads", "warn",
                       f"OMP_NUM_THREADS={raw} x {procs} process(es) > {cpus} CPUs",
                       evidence=f"OMP_NUM_THREADS={raw}; processes per node {procs}; CPUs {cpus} ({facts.system.cpu_count.source})",
                       cause="more compute threads than cores: CPU ops, data loading and the NCCL proxy threads contend "
                             "and steps slow down",
                       fix=[f"export OMP_NUM_THREADS={max(cpus // procs, 1)}"])
    return None


@check("env.alloc_conf", "PYTORCH_CUDA_ALLOC_CONF is valid", gpu=True)
def alloc_conf(facts):
    env = _env(facts)
    var = "PYTORCH_CUDA_ALLOC_CONF" if "PYTORCH_CUDA_ALLOC_CONF" in env else "PYTORCH_ALLOC_CONF"
    raw = env.get(var)
    if not raw:
        return None
    bad = []
    for item in raw.split(","):
        key = item.split(":", 1)[0].strip()
        if key and key not in _ALLOC_KEYS:
            bad.append(key)
        elif ":" not in item:
            bad.append(item.strip())
    if not bad:
        return None
    return Finding("env.alloc_conf", "env.alloc_conf", "error", f"{var} has unknown option(s): {bad}",
                   evidence=f"{var}={raw!r}", cause="torch raises 'Unrecognized CachingAllocator option' at the first CUDA allocation",
                   fix=[f"export {var}=expandable_segments:True   # the usual fragmentation fix", "syntax is key:value,key:value"])


@check("env.master_addr", "MASTER_ADDR / MASTER_PORT consistent")
def master_addr(facts):
    env = _env(facts)
    addr, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
    if port is not None and (not port.isdigit() or not 0 < int(port) < 65536):
        return Finding("env.master_addr.port", "env.master_addr", "error", f"MASTER_PORT={port!r} is not a TCP port",
                       evidence=f"MASTER_PORT={port!r}", cause="the rendezvous cannot bind or connect", fix=["export MASTER_PORT=29500"])
    if (addr is None) != (port is None):
        return Finding("env.master_addr.partial", "env.master_addr", "warn", "only one of MASTER_ADDR / MASTER_PORT is set",
                       evidence=f"MASTER_ADDR={addr!r}, MASTER_PORT={port!r}",
                       cause="init_process_group(init_method='env://') needs both; a leftover from another job is a common source of "
                             "'connection refused' or a hang", fix=["set both, or unset both and let torchrun / the scheduler set them"])
    return None


@check("env.cuda_launch_blocking", "CUDA_LAUNCH_BLOCKING not left on", gpu=True)
def launch_blocking(facts):
    v = _env(facts).get("CUDA_LAUNCH_BLOCKING")
    if v is None or v.strip() in ("", "0"):
        return None
    return Finding("env.cuda_launch_blocking", "env.cuda_launch_blocking", "warn",
                   "CUDA_LAUNCH_BLOCKING=1 makes every kernel launch synchronous",
                   evidence=f"CUDA_LAUNCH_BLOCKING={v}", cause="useful to locate a CUDA error, but training runs much slower",
                   fix=["unset CUDA_LAUNCH_BLOCKING after debugging"])
