"""The code stays clean under the project's ruff configuration (pyflakes, isort, line length)."""

import shutil
import subprocess
import sys

import pytest
from utils import ROOT


def test_ruff_is_clean():
    if shutil.which("ruff") is None and subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True).returncode:
        pytest.skip("ruff is not installed (it is in the test extra: pip install -e '.[test]')")
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "src", "tests", "benchmarks", "examples"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
