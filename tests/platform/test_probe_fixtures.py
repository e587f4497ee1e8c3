"""The probes against recorded outputs: /proc and /sys trees, topo matrices, IB sysfs, dmesg, nvidia-smi, NVML."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from rubin.platform import nvml, nvml_fake, probe_driver, probe_environment, probe_software, probe_system
from rubin.platform import probe as probe_mod
from rubin.platform.commands import CommandResult, FakeRunner, Runner
from rubin.platform.probe_interconnect import ib_ports, parse_topology
from rubin.platform.sources import Sources

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "doctor"
TREES = FIX / "trees"


def src(tree, **kw):
    return Sources(root=str(TREES / tree), env=kw.pop("env", {}), runner=kw.pop("runner", FakeRunner({})), **kw)


def test_topology_nvswitch_matrix():
    t = parse_topology((FIX / "topo" / "h100x8_nvswitch.txt").read_text())
    assert t.gpus() == [f"GPU{i}" for i in range(8)]
    assert len(t.devices) == 16
    assert t.links["GPU0"]["GPU7"] == "NV18" and t.links["GPU3"]["NIC3"] == "PXB" and t.links["GPU0"]["GPU0"] == "X"
    assert t.nic_names["NIC5"] == "mlx5_5"
    assert t.cpu_affinity["GPU4"] == "48-95,144-191" and t.numa_affinity["GPU4"] == "1"


def test_topology_pcie_matrix_and_garbage():
    t = parse_topology((FIX / "topo" / "h100x4_pcie_sys.txt").read_text())
    assert t.links["GPU0"]["GPU2"] == "SYS" and t.links["GPU2"]["GPU3"] == "NODE" and t.links["GPU0"]["GPU1"] == "NV18"
    with pytest.raises(ValueError, match="no topology header"):
        parse_topology("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")


def test_ib_sysfs_tree_states():
    ports = {p.device: p for p in ib_ports(src("ib_ports_down"))}
    assert ports["mlx5_0"].state == "ACTIVE" and ports["mlx5_0"].rate.startswith("400")
    assert ports["mlx5_1"].state == "DOWN" and ports["mlx5_1"].phys_state == "Polling"
    assert ports["mlx5_2"].state == "INIT"
    assert ports["mlx5_bond_0"].link_layer == "Ethernet"
    assert ib_ports(src("docker_no_runtime")) == []


def test_system_probe_in_a_docker_container_without_gpu_runtime():
    f = probe_system.probe(src("docker_no_runtime"))
    assert f.container.value == "docker"
    assert f.shm_total_bytes.value == 64 * 2**20
    assert (f.memlock_soft_bytes.value, f.memlock_hard_bytes.value) == (8388608, 8388608)
    assert f.cgroup_memory_limit_bytes.value == 8 * 2**30 and f.cgroup_cpu_limit.value == 4.0
    assert f.cpu_model.value == "Arm Neoverse-V2 (NVIDIA Grace)"
    assert f.os_name.value == "Debian GNU/Linux 12 (bookworm)" and f.kernel.value == "6.8.0-1015-aws"
    assert f.dmi_vendor.unknown and "does not exist" in f.dmi_vendor.reason


def test_system_probe_bare_metal_gpu_host():
    f = probe_system.probe(src("gpu_host"))
    assert f.container.value == "none" and f.numa_nodes.value == 2
    assert f.memlock_soft_bytes.value == -1 and f.cgroup_memory_limit_bytes.value == -1
    assert f.ram_total_bytes.value == 1981427716 * 1024 and f.secure_boot.value is False
    assert f.cpu_model.value == "Intel(R) Xeon(R) Platinum 8480C" and f.dmi_vendor.value == "Microsoft Corporation"


def test_driver_probe_loaded_module_and_dev_nodes():
    run = FakeRunner({"nvidia-smi -L": "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)\n"})
    with nvml_fake.install(FIX / "nvml" / "h100x8_healthy.json"):
        d = probe_driver.probe(src("gpu_host", runner=run))
    assert d.module_loaded.value is True and d.module_version.value == "570.124.06"
    assert d.nouveau_loaded.value is False and d.gpu_pci_devices.value == 8
    assert {n.path for n in d.dev_nodes.value} >= {"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"}
    assert d.driver_version.value == "570.124.06" and d.cuda_driver_version.value == "12.8"
    assert d.nvidia_smi.value.returncode == 0 and run.calls == [["nvidia-smi", "-L"]]
    nvml.reset()


@pytest.mark.parametrize("name", ["no_driver.txt", "mismatch.txt", "no_devices.txt", "gpu_lost.txt"])
def test_driver_probe_keeps_nvidia_smi_failure_text(name):
    text = (FIX / "smi" / name).read_text()
    run = FakeRunner({"nvidia-smi -L": CommandResult(["nvidia-smi", "-L"], 9, text, ""), "modinfo -F version nvidia":
                      CommandResult(["modinfo"], 1, "", "modinfo: ERROR: Module nvidia not found.")})
    with nvml.override(None, "Driver Not Loaded", "DRIVER_NOT_LOADED"):
        d = probe_driver.probe(src("nouveau_host", runner=run))
    assert d.nvidia_smi.value.returncode == 9 and d.nvidia_smi.value.output == text.strip()
    assert d.module_loaded.value is False and d.nouveau_loaded.value is True
    assert d.gpu_pci_drivers.value == ["nouveau"] and d.module_for_kernel.value is False
    assert d.driver_version.unknown and "Driver Not Loaded" in d.driver_version.reason


def test_secure_boot_efivar_is_read():
    assert probe_system.probe(src("nouveau_host")).secure_boot.value is True


def test_kernel_log_xids_with_age():
    text = (FIX / "dmesg" / "xid_mixed.txt").read_text()
    xids, other = probe_environment.parse_kernel_log(text, uptime_s=86400 + 10)
    assert [x.code for x in xids] == [79, 63, 31, 119, 999]
    assert xids[0].pci == "0000:3b:00" and xids[0].age_s == pytest.approx(410.0 - 0.123456, abs=1e-3)
    assert any("Kernel Module  570.124.06" in line for line in other)
    env = probe_environment.probe(src("gpu_host", runner=FakeRunner({"dmesg": text})))
    assert len(env.xid_events.value) == 5 and env.xid_events.source.startswith("dmesg")


def test_kernel_log_unreadable_is_unknown_with_reason():
    run = FakeRunner({"dmesg": CommandResult(["dmesg"], 1, "", "dmesg: read kernel buffer failed: Operation not permitted")})
    env = probe_environment.probe(src("docker_no_runtime", runner=run))
    assert env.xid_events.unknown and "Operation not permitted" in env.xid_events.reason


def test_gpu_probe_through_fake_nvml():
    from rubin.platform import probe_gpu

    with nvml_fake.install(FIX / "nvml" / "h100x8_healthy.json"):
        gpus = probe_gpu.probe(src("gpu_host")).value
    g = gpus[0]
    assert len(gpus) == 8 and g.compute_capability.value == "9.0" and g.memory_total_bytes.value == 85520809984
    assert g.nvlink_up.value == [True] * 18 and g.fabric_state.value == "completed"
    assert g.throttle_reasons.value == ["gpu_idle"] and g.power_limit_w.value == 700.0
    assert g.pci_bus_id.value == "00000000:18:00.0" and g.remap_failed.value is False
    with nvml_fake.install(FIX / "nvml" / "vr200x4.json"):
        vr = probe_gpu.probe(src("gpu_host")).value
    assert vr[0].compute_capability.value == "10.7" and vr[0].nvlink_up.value == [] and vr[0].pcie_gen.value == 6
    nvml.reset()


def test_gpu_probe_unsupported_fields_are_unknown_not_crashes():
    from rubin.platform import probe_gpu

    with nvml_fake.install({"devices": [{"nvmlDeviceGetName": "NVIDIA A10G", "nvmlDeviceGetEccMode": {"error": "NOT_SUPPORTED"}}]}):
        g = probe_gpu.probe(src("gpu_host")).value[0]
    assert g.name.value == "NVIDIA A10G"
    assert g.ecc_enabled.unknown and g.ecc_enabled.reason == "not supported on this GPU"
    assert g.mig_enabled.value is False and g.nvlink_up.value == []
    nvml.reset()


def test_software_probe_reads_the_torch_subprocess():
    out = ('RUBIN-TORCH-PROBE {"version": "2.13.0+cu130", "cuda": "13.0", "arch_list": ["sm_90", "sm_100", "compute_120"], '
           '"cudnn": 91002, "nccl": "2.27.7", "available": false, "count": 0, "error": "Found no NVIDIA driver on your system."}\n')
    run = FakeRunner({sys.executable: out, "nvcc": CommandResult(["nvcc"], 0, "Cuda compilation tools, release 12.4, V12.4.131\n")})
    saved = probe_software.torch_version_file
    probe_software.torch_version_file = lambda: {"__version__": "2.13.0+cu130", "cuda": "13.0", "hip": None}
    try:
        sw = probe_software.probe(src("gpu_host", runner=run))
    finally:
        probe_software.torch_version_file = saved
    assert sw.arch_list.value == ["sm_90", "sm_100", "compute_120"] and sw.cudnn_version.value == "9.10.2"
    assert sw.nccl_version.value == "2.27.7" and sw.torch_cuda_available.value is False
    assert "no NVIDIA driver" in sw.torch_probe_error.value and sw.nvcc_version.value == "12.4"


def test_software_probe_on_this_cpu_build_skips_the_subprocess():
    run = FakeRunner({})
    sw = probe_software.probe(src("gpu_host", runner=run))
    if sw.torch_cuda.value == "":
        assert sw.arch_list.value == [] and sw.torch_cuda_available.value is False
        assert not any(c[0] == sys.executable for c in run.calls)


def test_a_probe_that_crashes_or_hangs_becomes_unknown(monkeypatch):
    def boom(s):
        raise RuntimeError("kaput")

    def slow(s, **kw):
        time.sleep(3)

    monkeypatch.setattr(probe_mod.probe_system, "probe", boom)
    monkeypatch.setattr(probe_mod.probe_software, "probe", slow)
    with nvml.override(None, "NVML Shared Library Not Found", "LIBRARY_NOT_FOUND"):
        f = probe_mod.probe(src("docker_no_runtime"), deadline_s=1.0)
    assert f.system.shm_total_bytes.unknown and "kaput" in f.system.shm_total_bytes.reason
    assert f.software.torch_version.unknown and "did not finish" in f.software.torch_version.reason
    assert f.driver.gpu_pci_devices.value == 1


def test_real_runner_timeout_and_missing_program():
    r = Runner()
    assert r.run(["definitely-not-a-program-xyz"]).error == "not found on PATH"
    res = r.run([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.5)
    assert res.error == "timed out after 0.5s" and not res.ok


def test_probe_never_initializes_cuda_in_the_calling_process():
    code = ("import sys; from rubin.platform.probe import probe; f = probe(); "
            "print('torch' in sys.modules, f.system.cpu_count.known)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "True"], out.stderr
