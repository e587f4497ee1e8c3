"""The torch subprocess's answer is cached by the software probe, keyed on what it depends on; only healthy answers."""

from __future__ import annotations

import json

from rubin.platform import nvml, nvml_fake, probe_software
from rubin.platform.commands import FakeRunner
from rubin.platform.sources import Sources

HEALTHY = {"version": "2.11.0+cu130", "cuda": "13.0", "arch_list": ["sm_90"], "cudnn": 91900, "nccl": "2.28.9",
           "available": True, "count": 1}


class EnvRunner(FakeRunner):
    """A fake runner that also keeps the environment each command was started with."""

    def __init__(self, responses):
        super().__init__(responses=responses)
        self.envs = []

    def run(self, argv, timeout=30.0, env=None):
        self.envs.append(env)
        return super().run(argv, timeout=timeout, env=env)


def _runner(answer: dict) -> EnvRunner:
    import sys

    return EnvRunner({sys.executable: "RUBIN-TORCH-PROBE " + json.dumps(answer)})


def test_a_healthy_answer_is_cached_and_the_second_probe_starts_no_subprocess(tmp_path):
    runner = _runner(HEALTHY)
    src = Sources(runner=runner, env={"CUDA_VISIBLE_DEVICES": "0"}, cache_dir=str(tmp_path))
    first, cached = probe_software.torch_answer(src)
    assert first == HEALTHY and cached is False and len(runner.calls) == 1
    # availability through NVML: the subprocess does not create a CUDA context just to answer
    assert runner.envs[0]["PYTORCH_NVML_BASED_CUDA_CHECK"] == "1"
    again, cached = probe_software.torch_answer(src)
    assert again == HEALTHY and cached is True and len(runner.calls) == 1


def test_other_visible_gpus_or_a_gpu_lost_miss_the_cache(tmp_path):
    runner = _runner(HEALTHY)
    probe_software.torch_answer(Sources(runner=runner, env={"CUDA_VISIBLE_DEVICES": "0"}, cache_dir=str(tmp_path)))
    probe_software.torch_answer(Sources(runner=runner, env={"CUDA_VISIBLE_DEVICES": "1"}, cache_dir=str(tmp_path)))
    assert len(runner.calls) == 2
    h200 = nvml_fake.fake_nvml({"devices": [{"nvmlDeviceGetName": "NVIDIA H200"}]})
    with nvml.override(h200):
        probe_software.torch_answer(Sources(runner=runner, env={"CUDA_VISIBLE_DEVICES": "1"}, cache_dir=str(tmp_path)))
    assert len(runner.calls) == 3  # NVML now counts one GPU: a different machine state, asked again


def test_a_problem_is_never_cached(tmp_path):
    sick = {**HEALTHY, "available": False, "count": 0, "error": "The NVIDIA driver on your system is too old"}
    runner = _runner(sick)
    src = Sources(runner=runner, env={}, cache_dir=str(tmp_path))
    for _ in range(2):
        answer, cached = probe_software.torch_answer(src)
        assert answer["error"].startswith("The NVIDIA driver") and cached is False
    assert len(runner.calls) == 2 and not list(tmp_path.iterdir())


def test_a_fake_machine_never_touches_the_user_cache():
    assert Sources(runner=FakeRunner()).facts_cache_dir() is None
    assert Sources(root="/some/recorded/tree").facts_cache_dir() is None
    assert Sources(env={"RUBIN_CACHE_DIR": "off"}).facts_cache_dir() is None
    assert str(Sources(env={"RUBIN_CACHE_DIR": "/x/y"}).facts_cache_dir()) == "/x/y"
