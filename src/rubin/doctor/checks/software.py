"""Software checks: the torch wheel against the driver and the GPU architecture, the toolkit /
driver / torch CUDA versions side by side, and torch's own view of CUDA."""

from __future__ import annotations

import re

from rubin.doctor.checks._common import arch, cuda_tuple, data, gpu_label, gpus, min_driver_for_cuda, nvidia_present, vtuple
from rubin.doctor.findings import Finding
from rubin.doctor.registry import check

_ARCH = re.compile(r"^(sm|compute)_(\d+)([af]?)$")


def parse_arch(flag: str) -> tuple[str, int, int, str] | None:
    """'sm_100' -> ('sm', 10, 0, ''); 'compute_120' -> ('compute', 12, 0, ''); 'sm_90a' -> ('sm', 9, 0, 'a')."""
    m = _ARCH.match(flag.strip())
    if not m:
        return None
    n = m.group(2)
    return m.group(1), int(n[:-1]), int(n[-1]), m.group(3)


def arch_support(cc: str, arch_list: list[str]) -> tuple[str, str]:
    """How a GPU of compute capability ``cc`` runs torch's kernels: (status, the flag that serves it).

    native: SASS for exactly this CC. compatible: SASS of the same major, lower minor (CUDA binary
    compatibility). unverified: that case on Rubin (10.7), where sm_100 SASS is expected to run but is
    not confirmed; Rubin is not Blackwell. ptx: only PTX <= cc, JIT-compiled at first launch.
    missing: nothing runs ("no kernel image is available for execution on the device").
    """
    major, minor = (int(x) for x in cc.split("."))
    parsed = [p for p in (parse_arch(a) for a in arch_list) if p]
    for kind, ma, mi, suf in parsed:
        if kind == "sm" and (ma, mi) == (major, minor):
            return "native", f"sm_{ma}{mi}{suf}"
    same_major = sorted((mi, f"sm_{ma}{mi}") for kind, ma, mi, suf in parsed if kind == "sm" and ma == major and mi < minor and not suf)
    if same_major:
        return ("unverified" if (major, minor) == (10, 7) else "compatible"), same_major[-1][1]
    ptx = sorted(((ma, mi), f"compute_{ma}{mi}") for kind, ma, mi, suf in parsed
                 if kind == "compute" and (ma, mi) <= (major, minor) and not suf)
    if ptx:
        return "ptx", ptx[-1][1]
    return "missing", ""


@check("torch.cpu_wheel", "torch built with CUDA on a GPU machine", gpu=True)
def cpu_wheel(facts):
    sw = facts.software
    if sw.torch_cuda.get() != "" or sw.torch_hip.get("") or not (facts.gpu_list() or nvidia_present(facts)):
        return None
    cuda = facts.driver.cuda_driver_version.get()
    tag = "cu130" if cuda and cuda_tuple(cuda) >= (13, 0) else "cu126"
    return Finding("torch.cpu_wheel", "torch.cpu_wheel", "error", f"torch {sw.torch_version.get('?')} is a CPU-only build on a GPU machine",
                   evidence=f"torch.version.cuda = None ({sw.torch_cuda.source}); NVIDIA GPUs: "
                            f"{len(facts.gpu_list()) or facts.driver.gpu_pci_devices.get(0)}; driver CUDA {cuda or 'unknown'}",
                   cause="pip resolved the CPU wheel (a +cpu index, a requirements pin, or a platform without CUDA wheels), so "
                         "torch.cuda.is_available() is False and everything runs on the CPU",
                   fix=[f"pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/{tag}",
                        "check with: python -c 'import torch; print(torch.version.cuda, torch.cuda.is_available())'"])


@check("torch.cuda_vs_driver", "torch's CUDA build supported by the driver", gpu=True)
def cuda_vs_driver(facts):
    torch_cuda, drv_cuda = facts.software.torch_cuda.get(), facts.driver.cuda_driver_version.get()
    if not torch_cuda or not drv_cuda:
        return None
    t, d = cuda_tuple(torch_cuda), cuda_tuple(drv_cuda)
    if t <= d:
        return None
    need, source = min_driver_for_cuda(torch_cuda)
    drv = facts.driver.driver_version.get("?")
    floor = data("cuda.yaml")["minor_compat_floor"].get(str(t[0]))
    ev = (f"torch built with CUDA {torch_cuda} ({facts.software.torch_cuda.source}); driver {drv} supports up to CUDA "
          f"{drv_cuda} ({facts.driver.cuda_driver_version.source}); CUDA {torch_cuda} ships with driver >= {need} ({source})")
    if t[0] == d[0] and floor and vtuple(drv) >= vtuple(floor["driver"]):
        return Finding("torch.cuda_vs_driver.minor", "torch.cuda_vs_driver", "warn",
                       f"torch's CUDA {torch_cuda} is newer than the driver's {drv_cuda} (same major: runs by minor-version compatibility)",
                       evidence=ev, cause="CUDA minor-version compatibility lets a 12.x/13.x runtime run on an older driver of the "
                       "same major, but PTX JIT (new GPUs, Triton/compiled kernels) and some features need the newer driver",
                       fix=[f"upgrade the driver to >= {need}", f"or install a torch wheel built for CUDA <= {drv_cuda}"])
    return Finding("torch.cuda_vs_driver", "torch.cuda_vs_driver", "error",
                   f"torch needs CUDA {torch_cuda} but the driver supports only CUDA {drv_cuda}", evidence=ev,
                   cause="the driver is older than the CUDA runtime in the torch wheel; torch says 'The NVIDIA driver on your system is "
                         "too old' and CUDA is unavailable",
                   fix=[f"install NVIDIA driver >= {need} (then reboot)",
                        f"or install torch built for CUDA <= {drv_cuda}: "
                        f"pip install torch --index-url https://download.pytorch.org/whl/cu{''.join(map(str, d))}"])


@check("torch.arch_missing", "GPU architecture in torch's arch list", gpu=True)
def arch_missing(facts):
    archs = facts.software.arch_list
    if not archs.known or not facts.software.torch_cuda.get():
        return None
    out, seen = [], set()
    for g in gpus(facts):
        cc = g.compute_capability.get()
        if not cc or cc in seen:
            continue
        seen.add(cc)
        status, flag = arch_support(cc, archs.value)
        info = arch(cc) or {"name": f"compute capability {cc}", "first_cuda": "?"}
        ev = f"{gpu_label(g)} is compute capability {cc} ({info['name']}); torch {facts.software.torch_version.get('?')} " \
             f"arch list: {' '.join(archs.value) or '(empty)'}"
        sid = cc.replace(".", "")
        if status == "missing":
            out.append(Finding(f"torch.arch_missing.sm{sid}", "torch.arch_missing", "error",
                               f"torch has no kernels for {info['name']} (sm_{sid})", evidence=ev, gpu=g.index,
                               cause="the wheel was compiled for other architectures; every CUDA kernel fails with 'no kernel image is "
                                     "available for execution on the device'",
                               fix=[f"install a torch wheel whose arch list has sm_{sid} (CUDA >= {info['first_cuda']}), e.g. "
                                    "pip install torch --index-url https://download.pytorch.org/whl/cu130",
                                    "check: python -c 'import torch; print(torch.cuda.get_arch_list())'"]))
        elif status == "unverified":
            out.append(Finding(f"torch.arch_missing.sm{sid}", "torch.arch_missing", "warn",
                               f"torch has no sm_{sid} kernels for Rubin; it would run the Blackwell {flag} kernels",
                               evidence=ev, gpu=g.index,
                               cause="Rubin (compute capability 10.7) is its own architecture, not Blackwell, even though both are "
                                     f"major 10; running {flag} SASS on it relies on binary compatibility that is not confirmed, and "
                                     "Rubin-specific paths (sm_107 in CUDA >= 13.4) are not used",
                               fix=["use a torch build with sm_107 (CUDA >= 13.4, PyTorch >= 2.14 for extensions/Inductor)",
                                    "validate numerics and speed with `rubin bench` and `rubin doctor --deep` before a long run"]))
        elif status == "ptx":
            out.append(Finding(f"torch.arch_missing.sm{sid}", "torch.arch_missing", "warn",
                               f"torch has only PTX ({flag}) for sm_{sid}: kernels are JIT-compiled", evidence=ev, gpu=g.index,
                               cause="without SASS for this GPU, the driver compiles PTX at first launch (minutes, cached in "
                                     "~/.nv/ComputeCache) and newer-architecture features are not used",
                               fix=[f"install a torch wheel with sm_{sid} in its arch list",
                                    "or set CUDA_CACHE_MAXSIZE=4294967296 so the JIT cache persists"]))
    return out


@check("cuda.versions", "CUDA toolkit, driver and torch versions", gpu=True)
def versions(facts):
    tk, drv, tc = facts.software.nvcc_version.get(), facts.driver.cuda_driver_version.get(), facts.software.torch_cuda.get()
    vals = {"toolkit (nvcc)": tk, "driver supports up to": drv, "torch built with": tc or None}
    shown = {k: v for k, v in vals.items() if v}
    if len(set(shown.values())) <= 1:
        return None
    ev = "; ".join(f"{k}: CUDA {v}" for k, v in shown.items())
    severity = "warn" if tk and drv and cuda_tuple(tk) > cuda_tuple(drv) else "info"
    cause = ("three different things: nvidia-smi's 'CUDA Version' is the highest CUDA the driver supports, not an installed "
             "toolkit; nvcc is the toolkit used to compile extensions; torch wheels bundle their own CUDA runtime and do not use "
             "the toolkit. They may differ; torch's must be <= the driver's")
    if severity == "warn":
        cause += (f". Here the toolkit ({tk}) is newer than the driver ({drv}): extensions built with this nvcc fail with "
                  "'CUDA driver version is insufficient'")
    return Finding("cuda.versions", "cuda.versions", severity, "CUDA versions differ (this is often fine)", evidence=ev, cause=cause,
                   fix=["build extensions with a toolkit whose major.minor matches torch.version.cuda (set CUDA_HOME)"]
                   + (["or upgrade the driver to support the toolkit"] if severity == "warn" else []))


@check("torch.cuda_unavailable", "torch sees the GPUs", gpu=True)
def cuda_unavailable(facts):
    sw = facts.software
    if not facts.gpu_list() or not sw.torch_cuda.get() or sw.torch_cuda_available.get() is not False:
        return None
    err = sw.torch_probe_error.get("")
    return Finding("torch.cuda_unavailable", "torch.cuda_unavailable", "error",
                   f"NVML sees {len(facts.gpu_list())} GPU(s) but torch.cuda.is_available() is False",
                   evidence=f"{sw.torch_cuda_available.source}; torch says: {err or '(no message)'}; "
                            f"CUDA_VISIBLE_DEVICES={facts.environment.variables.get({}).get('CUDA_VISIBLE_DEVICES', '(unset)')}",
                   cause="usually a driver too old for the wheel, a missing /dev/nvidia-uvm, CUDA_VISIBLE_DEVICES hiding the "
                         "GPUs, or MIG without a visible instance; the other findings here name which",
                   fix=["paste torch's message into `rubin doctor --explain -`",
                        "python -c 'import torch; torch.cuda.init()' shows the full error"])


@check("torch.installed", "torch importable")
def installed(facts):
    tv = facts.software.torch_version
    if tv.known or not tv.unknown:
        return None
    return Finding("torch.installed", "torch.installed", "warn", "torch is not installed in this Python",
                   evidence=f"{tv.source}: {tv.reason}", cause="rubin trains and benchmarks with PyTorch",
                   fix=["pip install torch --index-url https://download.pytorch.org/whl/cu130  # or /cpu"])
