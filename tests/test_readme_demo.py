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


def test_the_same_kind_of_cpu_must_give_the_same_figures_another_a_band():
    demo = _script()
    lines = ["step 20/1320  loss 2.0448  2,870.1 samples/s", "...", "step 1320/1320  loss 0.0016  2,769.3 samples/s",
             "eval step 1320: loss 0.0690  accuracy 0.9805"]
    here = "x86_64 GenuineIntel AVX2, torch 2.13.0+cpu, 2 threads"
    readme = demo.block(lines, here)
    other_cpu = [ln.replace("0.0016", "0.0005").replace("0.0690", "0.0798").replace("0.9805", "0.9833") for ln in lines]
    assert demo.check(readme, lines, here)[0]
    ok, what = demo.check(readme, other_cpu, here)  # the same CPU kind: a digit off is drift
    assert not ok and "same kind of CPU" in what
    ok, what = demo.check(readme, other_cpu, "x86_64 AuthenticAMD AVX512, torch 2.13.0+cpu, 2 threads")
    assert ok and "cross-CPU band" in what
    untrained = [ln.replace("0.0016", "0.4000").replace("0.9805", "0.8800") for ln in lines]
    assert not demo.check(readme, untrained, "another")[0]
    assert not demo.check(readme, [ln.replace("2.0448", "2.3026") for ln in lines], "another")[0]  # other init or data
    assert demo.check(readme.replace(f"<!-- written on: {here} -->", ""), other_cpu, here)[0]  # unrecorded: the band


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
    assert "written on" in p.stdout or "same kind of CPU" in p.stdout  # the README records its CPU
