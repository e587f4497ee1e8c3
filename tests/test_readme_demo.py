"""Issue 26 item 3: the README's demo transcript comes from a real run and may not drift."""

import importlib.util
import subprocess
import sys

import pytest
from utils import ROOT


def _script():
    spec = importlib.util.spec_from_file_location("readme_demo", ROOT / "scripts" / "readme_demo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_check_compares_losses_and_accuracy_not_throughput():
    demo = _script()
    a = "step 20/1320  loss 2.0448  2,870.1 samples/s  data 0.7ms compute 21.6ms\neval step 1320: loss 0.0690  accuracy 0.9805"
    faster = a.replace("2,870.1", "46.0").replace("21.6ms", "900.1ms")
    drifted = a.replace("loss 0.0690", "loss 0.0383")
    assert demo.figures(a) == demo.figures(faster) == [("loss", "2.0448"), ("loss", "0.0690"), ("accuracy", "0.9805")]
    assert demo.figures(a) != demo.figures(drifted)


def test_the_readme_holds_one_generated_block():
    demo = _script()
    block = demo.current()
    assert block.count("```console") == 1 and "$ rubin train" in block
    assert len(demo.figures(block)) >= 4  # first and last loss, eval loss, accuracy


@pytest.mark.slow
@pytest.mark.timeout(1200)  # the whole demo: 210 s beside the suite's other worker, more on busier cores
def test_the_readme_demo_transcript_matches_a_fresh_run():
    if importlib.util.find_spec("sklearn") is None:  # not imported here: importing it sets KMP_* variables
        pytest.skip("the digits data set ships with scikit-learn (the [digits] extra)")
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme_demo.py"), "--check"], capture_output=True,
                       text=True, timeout=3600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "README demo transcript matches" in p.stdout
