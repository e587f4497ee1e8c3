"""Environment facts: the variables that change GPU jobs, scheduler markers, and Xid / NVRM lines
from the kernel log."""

from __future__ import annotations

import re
from collections.abc import Mapping

from rubin.platform.facts import EnvironmentFacts, XidEvent, known, unknown
from rubin.platform.sources import Sources, guarded

# Exact names and prefixes of the variables worth showing. Anything that looks like a secret is
# dropped even if it matches (a token in NCCL_* is unlikely, but an issue paste must be safe).
_NAMES = {
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "CUDA_DEVICE_ORDER",
    "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING", "CUDA_HOME", "CUDA_PATH", "CUBLAS_WORKSPACE_CONFIG",
    "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_NVML_BASED_CUDA_CHECK",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK",
    "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK", "GLOO_SOCKET_IFNAME", "TORCH_DISTRIBUTED_DEBUG",
    "TORCH_CPP_LOG_LEVEL", "TORCH_SHOW_CPP_STACKTRACES", "TORCHELASTIC_RUN_ID", "CUDA_CACHE_PATH",
}
_PREFIXES = ("NCCL_", "TORCH_NCCL_", "UCX_", "FI_", "NVSHMEM_", "TORCHINDUCTOR_", "TRITON_")
_SECRET = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL", re.I)

# Scheduler -> the markers it sets (the first present names the scheduler).
SCHEDULERS: dict[str, tuple[str, ...]] = {
    "slurm": ("SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_JOB_PARTITION", "SLURM_NNODES", "SLURM_NTASKS",
              "SLURM_PROCID", "SLURM_LOCALID", "SLURM_CLUSTER_NAME", "SLURM_JOB_NODELIST", "SLURM_GPUS_ON_NODE"),
    "azureml": ("AZUREML_RUN_ID", "AZUREML_EXPERIMENT_ID", "AZUREML_CR_NODE_RANK", "AZUREML_NODE_COUNT",
                "AZ_BATCH_NODE_ID"),
    "skypilot": ("SKYPILOT_TASK_ID", "SKYPILOT_NODE_RANK", "SKYPILOT_NUM_NODES", "SKYPILOT_NUM_GPUS_PER_NODE"),
    "kubernetes": ("KUBERNETES_SERVICE_HOST", "PET_NNODES", "PET_NPROC_PER_NODE", "JOBSET_NAME",
                   "TRAINING_OPERATOR_JOB_NAME"),
    "torchrun": ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "GROUP_RANK"),
}

XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?([^)]*)\):\s*(\d+)\s*,?\s*(.*)")
_TS_RE = re.compile(r"^\[\s*(\d+\.\d+)\]")
_KERNEL_RE = re.compile(r"NVRM|nvidia|nouveau|Lockdown|module verification failed|Key was rejected|nvidia-fabricmanager", re.I)


def relevant_variables(env: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for k, v in env.items():
        if (k in _NAMES or k.startswith(_PREFIXES)) and not _SECRET.search(k):
            out[k] = v
    return dict(sorted(out.items()))


def scheduler(env: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """(kind, markers). A torchrun inside Slurm is "slurm": the outer scheduler names the job."""
    markers = {k: env[k] for names in SCHEDULERS.values() for k in names if k in env and not _SECRET.search(k)}
    for kind, names in SCHEDULERS.items():
        if any(n in env for n in names):
            return kind, markers
    return "none", markers


def parse_kernel_log(text: str, uptime_s: float | None = None) -> tuple[list[XidEvent], list[str]]:
    xids, other = [], []
    for line in text.splitlines():
        m = XID_RE.search(line)
        ts = _TS_RE.match(line)
        age = (uptime_s - float(ts.group(1))) if (ts and uptime_s is not None) else None
        if m:
            xids.append(XidEvent(code=int(m.group(2)), pci=m.group(1).strip() or None, text=line.strip(),
                                 age_s=None if age is None else max(age, 0.0)))
        elif _KERNEL_RE.search(line):
            other.append(line.strip())
    return xids, other[-50:]


def kernel_log(src: Sources) -> tuple[str, str]:
    """(text, source). dmesg needs CAP_SYSLOG on many distros; /var/log/kern.log is the fallback."""
    res = src.run(["dmesg"])
    if res.ok:
        return res.stdout, "dmesg"
    for path in ("var/log/kern.log", "var/log/messages"):
        if src.exists(path):
            with open(src.path(path), "rb") as f:
                f.seek(0, 2)
                f.seek(max(f.tell() - 4 * 1024 * 1024, 0))  # the tail is enough: recent events
                return f.read().decode(errors="replace"), "/" + path
    raise PermissionError(None, None, f"dmesg ({res.reason()}) and no readable /var/log/kern.log")


def probe(src: Sources) -> EnvironmentFacts:
    f = EnvironmentFacts()
    f.variables = known(relevant_variables(src.env), "os.environ (GPU, NCCL, torch and launcher variables)")
    kind, markers = scheduler(src.env)
    f.scheduler = known(kind, "scheduler variables (SLURM_*, AZUREML_*, SKYPILOT_*, KUBERNETES_*, TORCHELASTIC_*)")
    f.scheduler_markers = known(markers, f.scheduler.source)
    log = guarded("dmesg", lambda: kernel_log(src))
    if not log.known:
        f.xid_events = f.kernel_messages = unknown(log.reason or "kernel log unreadable", "dmesg")
        return f
    text, source = log.value
    try:
        uptime = float(src.read("proc/uptime").split()[0])
    except (OSError, ValueError, IndexError):
        uptime = None
    xids, other = parse_kernel_log(text, uptime)
    f.xid_events = known(xids, f"{source} (NVRM: Xid lines)")
    f.kernel_messages = known(other, f"{source} (NVRM/nvidia/nouveau lines)")
    return f
