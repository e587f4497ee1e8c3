"""A CUDA device is read from NVML by its UUID, not its index: under CUDA_VISIBLE_DEVICES (Slurm, k8s) or
CUDA's fastest-first order, CUDA's device 0 is often NVML's device 1."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rubin.bench import matmul
from rubin.platform import nvml, nvml_fake
from rubin.train.observe.telemetry import Telemetry

UUIDS = ["GPU-00000000-6a2b-4c1d-9e0f-2b7c3d4e5f00", "GPU-00000001-6a2b-4c1d-9e0f-2b7c3d4e5f01"]
TWO_GPUS = {"devices": [{"nvmlDeviceGetUUID": UUIDS[i], "nvmlDeviceGetPowerUsage": 100_000 * (i + 1),
                         "nvmlDeviceGetClockInfo": 1000 + i} for i in range(2)]}


@pytest.fixture
def visible_reversed(monkeypatch):
    """CUDA_VISIBLE_DEVICES=1,0: CUDA's device i is NVML's device 1 - i. torch spells the UUID without NVML's
    ``GPU-`` prefix."""
    def props(device):
        return SimpleNamespace(uuid=UUIDS[1 - torch.device(device).index][len("GPU-"):])

    monkeypatch.setattr(torch.cuda, "get_device_properties", props)
    with nvml_fake.install(TWO_GPUS):
        yield


def test_the_nvml_index_of_a_cuda_device_comes_from_its_uuid(visible_reversed):
    assert nvml.index_of(torch.device("cuda", 0)) == 1
    assert nvml.index_of(torch.device("cuda", 1)) == 0
    assert "nvmlDeviceGetHandleByUUID" in nvml.get().lib.calls


def test_telemetry_samples_the_gpu_this_rank_trains_on(visible_reversed):
    host = SimpleNamespace(info=SimpleNamespace(device=torch.device("cuda", 0)))
    sample = Telemetry._nvml_sampler(host).sample()
    assert sample["power_w"] == 200.0 and sample["sm_clock_mhz"] == 1001.0  # NVML's device 1, not device 0


def test_the_matmul_benchmark_watches_the_gpu_it_measures(visible_reversed):
    assert matmul._watch(torch.device("cuda", 1), None).index == 0


def test_without_a_matching_uuid_or_nvml_the_cuda_index_is_used(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(uuid="ffffffff-0000"))
    with nvml_fake.install(TWO_GPUS):
        assert nvml.index_of(torch.device("cuda", 1)) == 1  # NVML does not know it (a MIG slice): CUDA's number
    with nvml.override(None, "no driver", "DRIVER_NOT_LOADED"):
        assert nvml.index_of(torch.device("cuda", 1)) == 1
    assert nvml.index_of(torch.device("cpu")) == 0
