"""Software facts: torch and its CUDA build, arch list, cuDNN and NCCL, the nvcc toolkit, packages.

``import torch`` costs over a second, so the probe reads torch's ``version.py`` and wheel metadata
instead. The arch list, ``cuda.is_available()`` and the library versions come from a subprocess
with a timeout: asking torch.cuda may initialize CUDA, which the calling process must never do.
The subprocess asks with ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` (availability from NVML, no CUDA
context; CUDA is initialized only to get torch's reason when it says no), and a healthy answer is
cached (``probe_cache``) under the Python, the torch install, the driver and the visible GPUs: on the
recorded H200 this subprocess was 5.5 s of the doctor's 5.9 s.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import importlib.util
import json
import os
import platform
import re
import sys

from rubin.platform import probe_cache
from rubin.platform.facts import SoftwareFacts, known, unknown
from rubin.platform.sources import Sources, guarded

# Packages worth showing next to torch (collect_env's list plus the distributed-training stack).
_PACKAGES = re.compile(
    r"^(torch|torchvision|torchaudio|triton|pytorch-triton.*|numpy|nvidia-.*|deepspeed|accelerate|transformers|"
    r"lightning|pytorch-lightning|apex|flash[-_]attn|transformer[-_]engine.*|xformers|mpi4py|onnx|rubin|"
    r"megatron.*|torchtitan|nccl.*|cupy.*|jax|jaxlib)$",
    re.I,
)

_TORCH_SUBPROCESS = r"""
import json, sys
out = {}
try:
    import torch
    out["version"] = torch.__version__
    out["cuda"] = torch.version.cuda
    flags = getattr(torch._C, "_cuda_getArchFlags", lambda: None)()
    out["arch_list"] = flags.split() if flags else []
    try:
        out["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception as e:
        out["cudnn_error"] = repr(e)
    try:
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if torch.distributed.is_nccl_available() else None
    except Exception as e:
        out["nccl_error"] = repr(e)
    out["available"] = bool(torch.cuda.is_available())
    out["count"] = torch.cuda.device_count() if out["available"] else 0
    if not out["available"]:
        try:
            torch.cuda.init()
        except Exception as e:  # the reason torch gives: "Found no NVIDIA driver", "driver too old"...
            out["error"] = str(e).strip().splitlines()[0][:500] if str(e).strip() else repr(e)
except Exception as e:
    out["fatal"] = repr(e)
print("RUBIN-TORCH-PROBE " + json.dumps(out))
"""


def _torch_dir() -> str | None:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def torch_version_file() -> dict:
    """torch/version.py's assignments, read without importing torch."""
    d = _torch_dir()
    if d is None:
        raise ModuleNotFoundError("torch is not installed in this Python")
    tree = ast.parse(open(os.path.join(d, "version.py")).read())
    out = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for t in targets:
            if isinstance(t, ast.Name) and node.value is not None:
                try:
                    out[t.id] = ast.literal_eval(node.value)
                except ValueError:
                    pass
    return out


def wheel_version(*names: str) -> str | None:
    for name in names:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            continue
    return None


def cudnn_from_wheel() -> str | None:
    return wheel_version("nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "nvidia-cudnn-cu11")


def nccl_from_wheel() -> str | None:
    return wheel_version("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")


def packages() -> dict[str, str]:
    out = {}
    for dist in md.distributions():
        name = dist.metadata.get("Name") or ""
        if _PACKAGES.match(name):
            out[name.lower()] = dist.version
    return dict(sorted(out.items()))


def cudnn_text(v: int | None) -> str | None:
    """torch's 91002 -> "9.10.2" (cuDNN 9 encodes major*10000 + minor*100 + patch)."""
    if not v:
        return None
    v = int(v)
    if v >= 10000:
        return f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"
    return f"{v // 1000}.{(v % 1000) // 100}.{v % 100}"  # cuDNN 8: major*1000 + minor*100 + patch


def parse_nvcc(text: str) -> str:
    m = re.search(r"release (\d+\.\d+)", text)
    if not m:
        raise ValueError("no 'release X.Y' in nvcc --version output")
    return m.group(1)


def find_nvcc(src: Sources) -> str | None:
    found = src.commands.which("nvcc")
    if found:
        return found
    for home in (src.env.get("CUDA_HOME"), src.env.get("CUDA_PATH"), src.path("usr/local/cuda")):
        if home and os.path.isfile(os.path.join(home, "bin", "nvcc")):
            return os.path.join(home, "bin", "nvcc")
    return None


def run_torch_subprocess(src: Sources) -> dict:
    env = {**src.env, "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
    res = src.commands.run([sys.executable, "-c", _TORCH_SUBPROCESS], timeout=src.torch_timeout_s, env=env)
    for line in res.stdout.splitlines():
        if line.startswith("RUBIN-TORCH-PROBE "):
            return json.loads(line.split(" ", 1)[1])
    raise RuntimeError(res.reason())


def _cache_key(src: Sources) -> str:
    """What the torch answer depends on: the torch install, the driver, and which GPUs are visible."""
    d = _torch_dir()
    try:
        stamp = os.stat(os.path.join(d, "version.py")).st_mtime_ns if d else None
    except OSError:
        stamp = None
    try:
        driver = src.read("/proc/driver/nvidia/version")
    except OSError:
        driver = None
    nv = src.nvml()
    try:
        gpus = nv.device_count() if nv is not None else None
    except Exception:  # noqa: BLE001 - any NVML failure just makes a different key
        gpus = None
    visible = {k: src.env.get(k) for k in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")}
    return probe_cache.key(d, stamp, driver, gpus, visible)


def torch_answer(src: Sources) -> tuple[dict, bool]:
    """The torch subprocess's answer and whether it came from the cache."""
    folder = src.facts_cache_dir()
    k = _cache_key(src) if folder is not None else ""
    cached = probe_cache.load(folder, "torch-probe", k)
    if cached is not None:
        return cached, True
    value = run_torch_subprocess(src)
    healthy = "fatal" not in value and "error" not in value and value.get("available") is True
    if healthy:
        probe_cache.store(folder, "torch-probe", k, value)
    return value, False


def probe(src: Sources, *, ask_torch: bool = True) -> SoftwareFacts:
    f = SoftwareFacts()
    f.python_version = known(platform.python_version(), "platform.python_version()")
    vf = guarded("torch/version.py", torch_version_file)
    if not vf.known:
        for attr in ("torch_version", "torch_cuda", "torch_hip", "cudnn_version", "nccl_version", "arch_list"):
            setattr(f, attr, unknown(vf.reason or "torch is not importable", vf.source))
    else:
        f.torch_version = known(str(vf.value.get("__version__")), "torch/version.py")
        f.torch_cuda = known(vf.value.get("cuda") or "", "torch.version.cuda (torch/version.py)")
        f.torch_hip = known(vf.value.get("hip") or "", "torch.version.hip (torch/version.py)")
        if not f.torch_cuda.value:
            why = "CPU-only torch build" if not f.torch_hip.value else "ROCm torch build"
            f.arch_list = known([], f"torch built without CUDA ({why})")
            f.cudnn_version = unknown(f"not in a {why}", "torch")
            f.nccl_version = unknown(f"not in a {why}", "torch")
            f.torch_cuda_available = known(False, f"torch.version.cuda is None ({why})")
            f.torch_device_count = known(0, f.torch_cuda_available.source)
        elif ask_torch:
            sub = guarded("python -c 'import torch; ...' (subprocess)", lambda: torch_answer(src))
            if sub.known and "fatal" not in sub.value[0]:
                s, srcname = sub.value[0], sub.source
                via = " (cached)" if sub.value[1] else ""
                f.arch_list = known(s.get("arch_list", []), "torch._C._cuda_getArchFlags() in a subprocess" + via)
                f.cudnn_version = known(cudnn_text(s.get("cudnn")), "torch.backends.cudnn.version() in a subprocess" + via) \
                    if s.get("cudnn") else unknown(s.get("cudnn_error", "cuDNN not available to torch"), srcname)
                f.nccl_version = known(s["nccl"], "torch.cuda.nccl.version() in a subprocess" + via) \
                    if s.get("nccl") else unknown(s.get("nccl_error", "torch built without NCCL"), srcname)
                f.torch_cuda_available = known(bool(s.get("available")), "torch.cuda.is_available() in a subprocess" + via)
                f.torch_device_count = known(int(s.get("count", 0)), "torch.cuda.device_count() in a subprocess" + via)
                f.torch_probe_error = known(s.get("error", ""), "torch.cuda.init() in a subprocess" + via)
            else:
                reason = sub.value[0].get("fatal") if sub.known else sub.reason
                for attr in ("arch_list", "torch_cuda_available", "torch_device_count", "torch_probe_error"):
                    setattr(f, attr, unknown(f"torch subprocess failed: {reason}", sub.source))
                cudnn, nccl = cudnn_from_wheel(), nccl_from_wheel()
                f.cudnn_version = known(cudnn, "nvidia-cudnn wheel metadata") if cudnn else unknown(str(reason), sub.source)
                f.nccl_version = known(nccl, "nvidia-nccl wheel metadata") if nccl else unknown(str(reason), sub.source)
        else:
            cudnn, nccl = cudnn_from_wheel(), nccl_from_wheel()
            f.cudnn_version = known(cudnn, "nvidia-cudnn wheel metadata") if cudnn else unknown("not asked", "wheel metadata")
            f.nccl_version = known(nccl, "nvidia-nccl wheel metadata") if nccl else unknown("not asked", "wheel metadata")
    nvcc = find_nvcc(src)
    if nvcc is None:
        f.nvcc_path = known("", "PATH, $CUDA_HOME, /usr/local/cuda")
        f.nvcc_version = unknown("nvcc not found (no CUDA toolkit installed; torch wheels do not need one)", "nvcc --version")
    else:
        f.nvcc_path = known(nvcc, "PATH, $CUDA_HOME, /usr/local/cuda")
        res = src.run([nvcc, "--version"])
        f.nvcc_version = guarded("nvcc --version", lambda: parse_nvcc(res.stdout)) if res.ok else unknown(res.reason(), "nvcc --version")
    f.packages = guarded("importlib.metadata", packages)
    return f
