"""Every check: one fixture that triggers it and one (the healthy 8x H100 node) that does not."""

from __future__ import annotations

import pytest
from doctor_fixtures import FIX, gpu, healthy, probe_fixture, runner

from rubin.doctor import registry
from rubin.platform.commands import CommandResult
from rubin.platform.facts import Command, DevNode, IbPort, known, unknown
from rubin.platform.probe_environment import parse_kernel_log
from rubin.platform.probe_interconnect import parse_topology


def _set(facts, path, value, source="test"):
    obj = facts
    *head, last = path.split(".")
    for p in head:
        obj = getattr(obj, p)
    setattr(obj, last, known(value, source))
    return facts


def _gpu(attr, value, i=0):
    def mut(f):
        setattr(gpu(f, i), attr, known(value, "test"))
        return f
    return mut


def _env(**kw):
    def mut(f):
        f.environment.variables = known({**f.environment.variables.value, **kw}, "test")
        return f
    return mut


def cpu_only(f):
    f.gpus = unknown("NVML unavailable: NVML Shared Library Not Found", "NVML")
    d = f.driver
    d.gpu_pci_devices, d.gpu_pci_drivers, d.dev_nodes = known(0, "t"), known([], "t"), known([], "t")
    d.module_loaded, d.nouveau_loaded = known(False, "t"), known(False, "t")
    d.nvidia_smi = known(Command(argv=["nvidia-smi", "-L"], error="not found on PATH"), "t")
    d.nvml_error, d.nvml_error_name = known("NVML Shared Library Not Found", "t"), known("LIBRARY_NOT_FOUND", "t")
    d.driver_version = d.cuda_driver_version = unknown("NVML unavailable")
    f.interconnect.topology = unknown("no GPUs")
    return f


def xids(text):
    def mut(f):
        events, _ = parse_kernel_log(text, uptime_s=86400)
        f.environment.xid_events = known(events, "dmesg")
        return f
    return mut


def smi_fails(name):
    def mut(f):
        f.driver.nvidia_smi = known(Command(argv=["nvidia-smi", "-L"], returncode=9, output=(FIX / "smi" / name).read_text()), "t")
        return f
    return mut


def driver_gone(f):
    f.gpus = unknown("NVML unavailable: Driver Not Loaded")
    f.driver.module_loaded = known(False, "t")
    f.driver.nvml_error_name = known("DRIVER_NOT_LOADED", "t")
    f.driver.module_for_kernel = known(False, "modinfo: Module nvidia not found")
    return f


def topo_pcie(f):
    f.interconnect.topology = known(parse_topology((FIX / "topo" / "h100x4_pcie_sys.txt").read_text()), "t")
    return f


def rubin_sm100_only(f):
    for g in f.gpu_list():
        g.compute_capability = known("10.7", "t")
        g.name = known("NVIDIA VR200", "t")
    f.driver.driver_version = known("615.20", "t")
    f.driver.cuda_driver_version = known("13.4", "t")
    f.software.torch_cuda = known("13.0", "t")
    f.software.arch_list = known(["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"], "t")
    return f


def video_only(f):
    f.system.user, f.system.user_groups = known("alice", "t"), known(["alice"], "t")
    f.driver.dev_nodes = known([DevNode(path="/dev/nvidia0", mode="0660", group="video", accessible=True),
                                DevNode(path="/dev/nvidia-uvm", mode="0666", group="root", accessible=True)], "t")
    return f


def nics_far(f):
    t = f.interconnect.topology.value
    for g in t.gpus():
        for n in t.devices:
            if n.startswith("NIC"):
                t.links[g][n] = "SYS"
    return f


TRIGGERS = {
    "nic.gpu_affinity": (nics_far, "warn"),
    "system.cpu_only": (cpu_only, "info"),
    "system.shm_small": (lambda f: _set(f, "system.shm_total_bytes", 64 * 2**20), "error"),
    "system.memlock_low": (lambda f: _set(f, "system.memlock_soft_bytes", 64 * 1024), "warn"),
    "system.disk_low": (lambda f: _set(f, "system.disk_free_bytes", 3 * 2**30), "error"),
    "system.ram_for_checkpoint": (lambda f: _set(f, "system.ram_total_bytes", 256 * 2**30), "warn"),
    "system.cgroup_memory": (lambda f: _set(f, "system.cgroup_memory_limit_bytes", 8 * 2**30), "warn"),
    "system.video_group": (video_only, "warn"),
    "driver.not_loaded": (driver_gone, "error"),
    "driver.nvidia_smi": (smi_fails("no_driver.txt"), "error"),
    "driver.nvml_mismatch": (smi_fails("mismatch.txt"), "error"),
    "driver.nouveau": (lambda f: _set(f, "driver.nouveau_loaded", True), "error"),
    "driver.uvm_missing": (lambda f: _set(f, "driver.dev_nodes", [DevNode(path="/dev/nvidia0", mode="0666", group="root",
                                                                          accessible=True)]), "error"),
    "driver.dev_permissions": (lambda f: _set(f, "driver.dev_nodes", [DevNode(path="/dev/nvidia0", mode="0600", group="root",
                                                                              accessible=False)]), "error"),
    "driver.too_old_for_gpu": (lambda f: _set(rubin_sm100_only(f), "driver.driver_version", "580.65.06"), "error"),
    "gpu.persistence": (_gpu("persistence_mode", False), "warn"),
    "gpu.fabric": (_gpu("fabric_state", "in_progress"), "error"),
    "torch.cpu_wheel": (lambda f: _set(f, "software.torch_cuda", ""), "error"),
    "torch.cuda_vs_driver": (lambda f: _set(f, "software.torch_cuda", "13.0"), "error"),
    "torch.arch_missing": (lambda f: _set(f, "software.arch_list", ["sm_70", "sm_75", "sm_80", "sm_86"]), "error"),
    "cuda.versions": (lambda f: _set(f, "software.nvcc_version", "13.0"), "warn"),
    "torch.cuda_unavailable": (lambda f: _set(f, "software.torch_cuda_available", False), "error"),
    "torch.installed": (lambda f: setattr(f.software, "torch_version", unknown("torch is not installed", "torch/version.py")) or f, "warn"),
    "gpu.mig": (_gpu("mig_enabled", True), "warn"),
    "gpu.ecc": (_gpu("ecc_volatile_uncorrected", 2), "error"),
    "gpu.row_remap": (_gpu("remap_failed", True), "error"),
    "gpu.retired_pages": (_gpu("retired_pages_pending", True), "warn"),
    "gpu.throttle": (_gpu("throttle_reasons", ["hw_thermal_slowdown"]), "error"),
    "gpu.power_cap": (_gpu("power_limit_w", 450.0), "warn"),
    "gpu.pcie": (_gpu("pcie_width", 8), "warn"),
    "gpu.temperature": (_gpu("temp_c", 91), "warn"),
    "gpu.memory_in_use": (_gpu("memory_used_bytes", 60 * 2**30), "warn"),
    "gpu.count": (lambda f: _set(f, "driver.gpu_pci_devices", 9), "error"),
    "gpu.mixed": (_gpu("name", "NVIDIA H200", 3), "warn"),
    "nvlink.down": (_gpu("nvlink_up", [True] * 16 + [False, False]), "error"),
    "nvlink.topology": (topo_pcie, "error"),
    "ib.ports": (lambda f: _set(f, "interconnect.ib_ports", [IbPort(device="mlx5_3", port=1, state="DOWN", phys_state="Disabled",
                                                                     rate="400 Gb/sec (4X NDR)", link_layer="InfiniBand")]), "error"),
    "env.cuda_visible_devices": (_env(CUDA_VISIBLE_DEVICES="0,1,8"), "error"),
    "env.nccl_p2p_disable": (_env(NCCL_P2P_DISABLE="1"), "warn"),
    "env.nccl_ib_disable": (lambda f: _env(NCCL_IB_DISABLE="1")(_set(f, "interconnect.ib_ports", [IbPort(
        device="mlx5_0", port=1, state="ACTIVE", phys_state="LinkUp", rate="400", link_layer="InfiniBand")])), "warn"),
    "env.nccl_socket_ifname": (_env(NCCL_SOCKET_IFNAME="ens5"), "error"),
    "env.omp_threads": (_env(OMP_NUM_THREADS="48"), "warn"),
    "env.alloc_conf": (_env(PYTORCH_CUDA_ALLOC_CONF="expandable_segment:True"), "error"),
    "env.master_addr": (_env(MASTER_PORT="eighty"), "error"),
    "env.cuda_launch_blocking": (_env(CUDA_LAUNCH_BLOCKING="1"), "warn"),
    "xid.events": (xids("[86000.1] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=python, GPU has fallen off the bus."), "error"),
}


# The finding each trigger must produce: the check id, or "<check id>.<variant>" where the mutation picks
# a specific cause (driver_gone is the DKMS case, MASTER_PORT="eighty" the port, an H100 without sm_90 ...).
FINDING_IDS = {cid: cid for cid in TRIGGERS} | {
    "driver.not_loaded": "driver.not_loaded.dkms",
    "driver.too_old_for_gpu": "driver.too_old_for_gpu.sm107",
    "env.master_addr": "env.master_addr.port",
    "env.nccl_socket_ifname": "env.nccl_socket_ifname.nccl",
    "env.omp_threads": "env.omp_threads.oversubscribed",
    "gpu.ecc": "gpu.ecc.uncorrected",
    "gpu.pcie": "gpu.pcie.width",
    "gpu.row_remap": "gpu.row_remap.failed",
    "torch.arch_missing": "torch.arch_missing.sm90",
    "xid.events": "xid.79",
}


def _by_check(facts, check_id):
    c = next(c for c in registry.all_checks() if c.id == check_id)
    return registry.run_check(c, facts)


def test_every_registered_check_has_a_trigger_case():
    ids = {c.id for c in registry.all_checks()}
    assert len(ids) >= 30
    assert ids == set(TRIGGERS)


@pytest.mark.parametrize("check_id", sorted(TRIGGERS))
def test_check_is_quiet_on_the_healthy_node(check_id):
    out = _by_check(healthy(), check_id)
    assert [(f.id, f.severity) for f in out] == [(check_id, "ok")], out


@pytest.mark.parametrize("check_id", sorted(TRIGGERS))
def test_check_fires_on_its_fixture(check_id):
    mutate, severity = TRIGGERS[check_id]
    out = _by_check(mutate(healthy()), check_id)
    assert any(f.severity == severity for f in out), out
    fired = [f for f in out if f.severity == severity]
    assert [f.id for f in fired] == [FINDING_IDS[check_id]], fired
    assert all(f.evidence and f.fix for f in fired if f.severity in ("warn", "error")), fired


def test_a_check_that_raises_becomes_a_failed_finding():
    def boom(facts):
        raise KeyError("no such fact")

    out = registry.run_check(registry.Check("test.boom", "boom", "test", boom), healthy())
    assert len(out) == 1 and out[0].failed and out[0].severity == "warn"
    assert "KeyError" in out[0].title


def test_rubin_is_not_blackwell_even_with_sm100_kernels():
    out = _by_check(rubin_sm100_only(healthy()), "torch.arch_missing")
    assert out[0].severity == "warn" and out[0].id == "torch.arch_missing.sm107"
    assert "not Blackwell" in out[0].cause and "sm_100" in out[0].title


def test_blackwell_rtx_sm120_is_served_natively_but_sm103_by_sm100():
    from rubin.doctor.checks.software import arch_support

    archs = ["sm_80", "sm_90", "sm_100", "sm_120", "compute_120"]
    assert arch_support("12.0", archs) == ("native", "sm_120")
    assert arch_support("10.3", archs) == ("compatible", "sm_100")
    assert arch_support("10.7", archs) == ("unverified", "sm_100")
    assert arch_support("9.0", ["sm_80", "compute_80"]) == ("ptx", "compute_80")
    assert arch_support("10.0", ["sm_80", "sm_86", "sm_90"]) == ("missing", "")


def test_driver_not_loaded_causes_are_told_apart():
    from rubin.doctor.checks.driver import driver_causes

    container = probe_fixture("docker_no_runtime", nvml_json=None, run=runner(**{"nvidia-smi -L": None}))
    assert driver_causes(container)[2] == "container"
    nouveau = probe_fixture("nouveau_host", nvml_json="init_driver_not_loaded.json",
                            run=runner(**{"nvidia-smi -L": CommandResult(["nvidia-smi"], 9, (FIX / "smi" / "no_driver.txt").read_text())}))
    assert nouveau.driver.gpu_pci_drivers.value == ["nouveau"]
    assert driver_causes(nouveau)[2] == "nouveau"
    nouveau.driver.nouveau_loaded = known(False, "t")
    nouveau.driver.gpu_pci_drivers = known([""], "t")
    sb = runner(dmesg=(FIX / "dmesg" / "secure_boot.txt").read_text())
    secure = probe_fixture("nouveau_host", nvml_json="init_driver_not_loaded.json", run=sb)
    secure.driver.nouveau_loaded, secure.driver.gpu_pci_drivers = known(False, "t"), known([""], "t")
    assert secure.system.secure_boot.value is True
    assert driver_causes(secure)[2] == "secure_boot"
    dkms = driver_gone(healthy())
    assert driver_causes(dkms)[2] == "dkms"


def test_xid_table_covers_the_codes_operators_see():
    from rubin.doctor.checks._common import data

    codes = set(data("xid.yaml")["xids"])
    assert {13, 31, 43, 48, 63, 64, 74, 79, 92, 94, 95, 119, 120} <= codes
    out = _by_check(xids((FIX / "dmesg" / "xid_mixed.txt").read_text())(healthy()), "xid.events")
    by_id = {f.id: f for f in out}
    assert by_id["xid.79"].severity == "error" and "Reboot" in by_id["xid.79"].fix[0]
    assert by_id["xid.63"].severity == "warn" and by_id["xid.119"].severity == "error"
    assert "not in rubin" in by_id["xid.999"].title


def test_old_xid_is_reported_one_level_lower():
    f = healthy()
    events, _ = parse_kernel_log("[100.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.", uptime_s=100.0 + 3 * 86400)
    f.environment.xid_events = known(events, "dmesg")
    assert _by_check(f, "xid.events")[0].severity == "warn"


def test_minor_version_compatibility_is_a_warning_not_an_error():
    f = _set(healthy(), "software.torch_cuda", "12.9")
    out = _by_check(f, "torch.cuda_vs_driver")
    assert out[0].severity == "warn" and out[0].id == "torch.cuda_vs_driver.minor"
    assert "575.51.03" in out[0].evidence


def test_socket_ifname_prefix_and_exclude_syntax():
    from rubin.doctor.checks.environment import ifname_matches

    assert ifname_matches("eth", ["eth0", "lo"]) == []
    assert ifname_matches("=eth", ["eth0"]) == ["eth"]
    assert ifname_matches("^docker,lo", ["eth0"]) == []
    assert ifname_matches("ib,ens5", ["ib0"]) == ["ens5"]


def test_gpu_checks_are_not_applicable_without_a_gpu_and_run_with_one():
    from rubin.doctor.registry import all_checks, run_checks
    from rubin.doctor.report import summary

    gpu_only = {c.id for c in all_checks() if c.gpu}
    assert {"driver.not_loaded", "gpu.ecc", "nvlink.down", "xid.events", "torch.cuda_unavailable"} <= gpu_only
    # The healthy 8x H100 node: every GPU check ran and passed; none is "not applicable".
    on_gpu = run_checks(healthy())
    assert not [f for f in on_gpu if f.skipped]
    assert gpu_only <= {f.id for f in on_gpu if f.severity == "ok"}
    # A container without the GPU runtime sees the GPU on the PCI bus: the GPU checks apply there
    # (driver.not_loaded explains the missing runtime).
    cpu = probe_fixture("docker_no_runtime", nvml_json=None, run=runner(**{"nvidia-smi -L": None}))
    assert "driver.not_loaded.container" in {f.id for f in run_checks(cpu)}
    # The same host with no NVIDIA device on the bus either: a CPU machine.
    cpu.driver.gpu_pci_devices = known(0, "t")
    found = run_checks(cpu)
    skipped = {f.id for f in found if f.skipped}
    assert skipped == gpu_only
    assert all(f.severity == "ok" and f.skipped == "no NVIDIA GPU on this machine" for f in found if f.skipped)
    s = summary(found)
    assert s["not_applicable"] == len(gpu_only) and s["ok"] == sum(f.severity == "ok" and not f.skipped for f in found)
    # A GPU check that finds something on a machine without a GPU still reports it.
    assert "system.cpu_only" in {f.id for f in found if f.severity == "info"}
