import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


# Files whose tests run for minutes, started first: under pytest-xdist (addopts: --dist loadfile) a
# worker that picked one of them up last would run it alone while the other sits idle.
FIRST = ("tests/test_readme_demo.py", "tests/train/test_determinism.py", "tests/launch/test_slurm.py",
         "tests/bench/test_gpu_check.py", "tests/byom/test_examples.py", "tests/profile/test_profile_analysis.py")


def pytest_collection_modifyitems(config, items):
    rank = {f: i for i, f in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(FIRST)))  # stable: the rest keep their order
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; run scripts/gpu-check.sh on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _no_leaked_env():
    """Fail a test that leaks environment variables (a real source of cross-test flakiness)."""
    before = dict(os.environ)
    yield
    after = dict(os.environ)
    leaked = {k for k in after.keys() ^ before.keys()} | {k for k in after if k in before and after[k] != before[k]}
    leaked = {k for k in leaked if not k.startswith(("PYTEST_", "COV_", "TORCHINDUCTOR_", "_TORCHINDUCTOR_"))}  # torch sets these itself
    for k in leaked:
        if k in before:
            os.environ[k] = before[k]
        else:
            os.environ.pop(k, None)
    assert not leaked, f"test leaked environment variables: {sorted(leaked)}"
