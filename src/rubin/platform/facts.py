"""The typed facts that ``probe()`` collects and the doctor's checks read.

Every fact is a ``Fact[T]``: its value, where it came from (``source``: a file, a command, an NVML
function), and, when the probe could not find out, ``unknown=True`` with the ``reason``. An
unknown fact is never a crash and never a guess: a check that needs it stays quiet or says it
could not tell. A known fact can still be empty (no GPUs, no IB devices): that is an answer.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

T = TypeVar("T")

SCHEMA_VERSION = 1


class Fact(BaseModel, Generic[T]):
    model_config = ConfigDict(extra="forbid")

    value: T | None = None
    source: str = ""
    unknown: bool = False
    reason: str | None = None

    @property
    def known(self) -> bool:
        return not self.unknown and self.value is not None

    def get(self, default=None):
        return self.value if self.known else default

    def show(self) -> str:
        return f"unknown ({self.reason})" if self.unknown else str(self.value)


def known(value: Any, source: str) -> Fact:
    return Fact(value=value, source=source)


def unknown(reason: str, source: str = "") -> Fact:
    return Fact(value=None, source=source, unknown=True, reason=reason)


def _f():
    return Field(default_factory=lambda: unknown("not probed"))


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- records inside facts -----------------------------------------------------------------------


class DevNode(Model):
    path: str
    mode: str  # octal, e.g. "0666"
    group: str
    accessible: bool  # this user can open it read-write


class Command(Model):
    """What a program printed, or why it could not run."""

    argv: list[str]
    returncode: int | None = None
    output: str = ""
    error: str | None = None


class XidEvent(Model):
    code: int
    pci: str | None = None
    text: str  # the kernel log line, as printed
    age_s: float | None = None  # seconds before the probe (from dmesg timestamps and /proc/uptime)


class IbPort(Model):
    device: str
    port: int
    state: str  # "ACTIVE", "DOWN", "INIT", "ARMED"
    phys_state: str  # "LinkUp", "Disabled", "Polling"
    rate: str  # "400 Gb/sec (4X NDR)"
    link_layer: str  # "InfiniBand" or "Ethernet"


class Topology(Model):
    """``nvidia-smi topo -m``, parsed: ``links[a][b]`` is "X", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS"."""

    devices: list[str]
    links: dict[str, dict[str, str]]
    cpu_affinity: dict[str, str] = {}
    numa_affinity: dict[str, str] = {}
    nic_names: dict[str, str] = {}  # NIC0 -> mlx5_0 (the "NIC Legend")

    def gpus(self) -> list[str]:
        return [d for d in self.devices if d.startswith("GPU")]


# -- fact groups ----------------------------------------------------------------------------------


class SystemFacts(Model):
    hostname: Fact[str] = _f()
    os_name: Fact[str] = _f()
    kernel: Fact[str] = _f()
    arch: Fact[str] = _f()
    cpu_model: Fact[str] = _f()
    cpu_count: Fact[int] = _f()  # logical CPUs this process may use
    numa_nodes: Fact[int] = _f()
    ram_total_bytes: Fact[int] = _f()
    ram_available_bytes: Fact[int] = _f()
    shm_total_bytes: Fact[int] = _f()
    disk_path: Fact[str] = _f()
    disk_free_bytes: Fact[int] = _f()
    container: Fact[str] = _f()  # "none", "docker", "podman", "kubernetes", "lxc", "containerd"
    cgroup_memory_limit_bytes: Fact[int] = _f()  # -1: no limit
    cgroup_cpu_limit: Fact[float] = _f()  # CPUs; -1: no limit
    memlock_soft_bytes: Fact[int] = _f()  # -1: unlimited
    memlock_hard_bytes: Fact[int] = _f()
    secure_boot: Fact[bool] = _f()
    user: Fact[str] = _f()
    user_groups: Fact[list[str]] = _f()
    dmi_vendor: Fact[str] = _f()
    dmi_product: Fact[str] = _f()


class DriverFacts(Model):
    module_loaded: Fact[bool] = _f()
    module_version: Fact[str] = _f()  # from /proc/driver/nvidia/version
    proc_version_text: Fact[str] = _f()
    nouveau_loaded: Fact[bool] = _f()
    module_for_kernel: Fact[bool] = _f()  # `modinfo nvidia` finds a module built for the running kernel
    dkms_status: Fact[str] = _f()
    dev_nodes: Fact[list[DevNode]] = _f()
    nvidia_smi: Fact[Command] = _f()
    nvml_error: Fact[str] = _f()  # "" when NVML loaded
    nvml_error_name: Fact[str] = _f()
    driver_version: Fact[str] = _f()  # from NVML
    cuda_driver_version: Fact[str] = _f()  # highest CUDA the driver supports, "12.8"
    nvml_version: Fact[str] = _f()
    gpu_pci_devices: Fact[int] = _f()  # NVIDIA display/3D controllers on the PCI bus (sysfs)
    gpu_pci_drivers: Fact[list[str]] = _f()  # the kernel driver bound to each: nvidia, nouveau, vfio-pci, ""


class GpuFacts(Model):
    index: int
    name: Fact[str] = _f()
    uuid: Fact[str] = _f()
    pci_bus_id: Fact[str] = _f()
    compute_capability: Fact[str] = _f()
    memory_total_bytes: Fact[int] = _f()
    memory_used_bytes: Fact[int] = _f()
    persistence_mode: Fact[bool] = _f()
    ecc_enabled: Fact[bool] = _f()
    ecc_pending: Fact[bool] = _f()
    ecc_volatile_uncorrected: Fact[int] = _f()
    ecc_volatile_corrected: Fact[int] = _f()
    ecc_aggregate_uncorrected: Fact[int] = _f()
    ecc_aggregate_corrected: Fact[int] = _f()
    retired_pages_sbe: Fact[int] = _f()
    retired_pages_dbe: Fact[int] = _f()
    retired_pages_pending: Fact[bool] = _f()
    remapped_rows_correctable: Fact[int] = _f()
    remapped_rows_uncorrectable: Fact[int] = _f()
    remap_pending: Fact[bool] = _f()
    remap_failed: Fact[bool] = _f()
    sm_clock_mhz: Fact[int] = _f()
    sm_clock_max_mhz: Fact[int] = _f()
    throttle_reasons: Fact[list[str]] = _f()
    util_pct: Fact[int] = _f()
    temp_c: Fact[int] = _f()
    power_w: Fact[float] = _f()
    power_limit_w: Fact[float] = _f()
    power_default_limit_w: Fact[float] = _f()
    pcie_gen: Fact[int] = _f()
    pcie_gen_max: Fact[int] = _f()
    pcie_width: Fact[int] = _f()
    pcie_width_max: Fact[int] = _f()
    mig_enabled: Fact[bool] = _f()
    mig_pending: Fact[bool] = _f()
    nvlink_up: Fact[list[bool]] = _f()  # one entry per NVLink; [] when the GPU has none
    fabric_state: Fact[str] = _f()  # NVSwitch fabric registration: "completed", "in_progress", ...
    vbios: Fact[str] = _f()


class InterconnectFacts(Model):
    topology: Fact[Topology] = _f()
    ib_ports: Fact[list[IbPort]] = _f()
    net_interfaces: Fact[list[str]] = _f()


class SoftwareFacts(Model):
    python_version: Fact[str] = _f()
    torch_version: Fact[str] = _f()
    torch_cuda: Fact[str] = _f()  # the CUDA the wheel was built with; "" for a CPU-only build
    torch_hip: Fact[str] = _f()
    cudnn_version: Fact[str] = _f()
    nccl_version: Fact[str] = _f()
    arch_list: Fact[list[str]] = _f()  # sm_90, sm_100, compute_120 ...
    torch_cuda_available: Fact[bool] = _f()  # asked in a subprocess
    torch_device_count: Fact[int] = _f()
    torch_probe_error: Fact[str] = _f()
    nvcc_version: Fact[str] = _f()  # the installed toolkit, "13.0"
    nvcc_path: Fact[str] = _f()
    packages: Fact[dict[str, str]] = _f()


class EnvironmentFacts(Model):
    variables: Fact[dict[str, str]] = _f()
    scheduler: Fact[str] = _f()  # "none", "slurm", "kubernetes", "azureml", "skypilot", "torchrun"
    scheduler_markers: Fact[dict[str, str]] = _f()
    xid_events: Fact[list[XidEvent]] = _f()
    kernel_messages: Fact[list[str]] = _f()  # NVRM / nvidia / nouveau lines other than Xid


class Facts(Model):
    schema_version: int = SCHEMA_VERSION
    collected_at: str = ""
    duration_s: float = 0.0
    system: SystemFacts = Field(default_factory=SystemFacts)
    driver: DriverFacts = Field(default_factory=DriverFacts)
    gpus: Fact[list[GpuFacts]] = _f()
    interconnect: InterconnectFacts = Field(default_factory=InterconnectFacts)
    software: SoftwareFacts = Field(default_factory=SoftwareFacts)
    environment: EnvironmentFacts = Field(default_factory=EnvironmentFacts)
    probe_seconds: dict[str, float] = {}

    def gpu_list(self) -> list[GpuFacts]:
        return list(self.gpus.get([]) or [])
