"""rubin report: sections from real inputs, self-contained HTML, Markdown with figure files, refusals."""

from __future__ import annotations

import json
import re

import pytest
from reporthelp import all_inputs
from utils import ROOT, invoke

pytestmark = pytest.mark.slow
KINDS = ("verify", "env", "doctor", "bench", "compare", "run", "plan")


def test_html_has_a_section_per_input_and_is_self_contained(inputs, tmp_path):
    out = tmp_path / "report.html"
    r = invoke(["report", *all_inputs(inputs), "-o", out])
    assert r.exit_code == 0, r.stderr
    html = out.read_text()
    kinds = re.findall(r"<section id='[^']+' class='section' data-kind='([a-z-]+)'>", html)
    assert sorted(kinds) == sorted(KINDS)
    assert kinds[0] == "verify"  # the answer first
    # No network: no external resource of any kind, only inline SVG.
    assert not re.search(r"""(src|href)\s*=\s*['"]?(https?:|//)""", html)
    assert "<script" not in html and "<link" not in html
    figures = re.findall(r"<figure id='fig-\d+' class='fig'><svg ", html)
    # run: loss, eval, throughput, time split, memory; verify: envelope, time split; bench: busbw, matmul, membw; plan: memory bars
    assert len(figures) >= 11


def test_every_number_with_a_spread_shows_it(inputs, tmp_path):
    out = tmp_path / "report.html"
    assert invoke(["report", inputs["bench"], inputs["run"], inputs["verify"], "-o", out]).exit_code == 0
    html = out.read_text()
    assert "samples/s median [CI]" in html and re.search(r"\d\] n=\d", html)  # bench model rows: median [ci] n
    assert "per-step p10-p90" in html  # run throughput
    assert "± " in html  # verify: mean ± sd over seeds
    assert "band: 95% CI" in html


def test_plan_projection_is_labelled(tmp_path):
    plan = tmp_path / "cost.json"
    r = invoke(["plan", "cost", "--throughput", "1000", "--measured-gpu", "H100-SXM", "--work", "1e9",
                "--prices", ROOT / "examples" / "prices.example.yaml", "--json"])
    assert r.exit_code == 0, r.stderr
    plan.write_text(r.stdout)
    out = tmp_path / "r.html"
    assert invoke(["report", plan, "-o", out]).exit_code == 0
    html = out.read_text()
    projected = [o for o in json.loads(r.stdout)["options"] if o.get("projection")]
    assert projected, "the example prices list GPUs other than the measured one"
    assert "(projection)" in html and "(measured)" in html


def test_markdown_writes_figures_beside_it(inputs, tmp_path):
    out = tmp_path / "report.md"
    r = invoke(["report", inputs["run"], inputs["verify"], "-o", out])
    assert r.exit_code == 0, r.stderr
    md = out.read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert len(links) >= 6
    for link in links:
        svg = (tmp_path / link).read_text()
        assert svg.startswith("<svg") and "<polyline" in svg or "<rect" in svg
    assert "## Verify: convergence" in md and "| check | verdict | reason |" in md


@pytest.mark.parametrize("content, expect", [
    ('{"a": 1}', "is JSON but not one of rubin's outputs (no 'kind' field)"),
    ('{"kind": "rubin.something"}', "has kind='rubin.something', which rubin report does not read"),
    ("[1, 2]", "holds a JSON list, not one of rubin's outputs"),
    ("not json", "is not JSON"),
    ('{"kind": "rubin.bench.results", "schema_version": 1}', "is not valid"),
])
def test_wrong_kind_is_refused_with_one_line(tmp_path, content, expect):
    bad = tmp_path / "in.json"
    bad.write_text(content)
    r = invoke(["report", bad, "-o", tmp_path / "r.html"])
    assert r.exit_code == 2
    assert expect in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r.html").exists()


def test_a_directory_that_is_not_a_run(tmp_path):
    r = invoke(["report", tmp_path, "-o", tmp_path / "r.html"])
    assert r.exit_code == 2 and "is a directory but not a run dir" in r.stderr


def test_never_clobbers_without_force(inputs, tmp_path):
    out = tmp_path / "r.html"
    out.write_text("mine")
    r = invoke(["report", inputs["env"], "-o", out])
    assert r.exit_code == 2 and "--force" in r.stderr
    assert out.read_text() == "mine"
    assert invoke(["report", inputs["env"], "-o", out, "--force"]).exit_code == 0
    assert "Environment fingerprint" in out.read_text()


def test_bad_format(tmp_path, inputs):
    r = invoke(["report", inputs["env"], "-o", tmp_path / "r.x", "--format", "pdf"])
    assert r.exit_code == 2 and "--format='pdf' is not valid" in r.stderr
