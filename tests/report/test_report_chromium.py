"""The report in a real browser: headless Chromium renders it, every section is in the DOM, the page
and every figure have pixels (not blank), measured on screenshots.

Skipped where Chromium is missing (CI installs Debian's ``chromium``). Pillow reads the screenshots.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from reporthelp import all_inputs
from utils import invoke

pytestmark = [pytest.mark.chromium, pytest.mark.slow]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
KINDS = ("verify", "env", "doctor", "bench", "compare", "run", "plan")
CELL_W, CELL_H = 880, 420  # each figure gets its own cell on the contact sheet


def chromium(tmp_path, url: str, *extra: str) -> subprocess.CompletedProcess:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
           f"--user-data-dir={tmp_path / 'chromium-profile'}", *extra, url]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    return p


def colored_pixels(img) -> int:
    """Pixels that are clearly colored (data: lines, bands, bars), not white, gray or black (frame, text)."""
    raw = img.convert("RGB").tobytes()
    return sum(1 for i in range(0, len(raw), 3) if max(raw[i:i + 3]) - min(raw[i:i + 3]) > 40)


@pytest.fixture(scope="module")
def report(inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp("chromium") / "report.html"
    r = invoke(["report", *all_inputs(inputs), "-o", out])
    assert r.exit_code == 0, r.stderr
    return out


def test_dom_has_every_section_and_figure(report, tmp_path):
    dom = chromium(tmp_path, report.as_uri(), "--dump-dom").stdout
    kinds = re.findall(r'<section id="[^"]+" class="section" data-kind="([a-z-]+)">', dom)
    assert sorted(kinds) == sorted(KINDS)
    html = report.read_text()
    n_figs = len(re.findall(r"<figure id='fig-\d+'", html))
    assert n_figs >= 11
    # The browser parsed every figure into an SVG element (a malformed one would be dropped or swallowed).
    assert len(re.findall(r'<figure id="fig-\d+" class="fig"><svg ', dom)) == n_figs
    for title in ("Verify: convergence", "Environment fingerprint", "Doctor: machine diagnosis", "Bench:", "Compare:", "Run:",
                  "Plan: memory"):
        assert title in dom


def test_page_renders(report, tmp_path):
    Image = pytest.importorskip("PIL.Image", reason="Pillow reads the screenshots (pip install pillow)")
    shot = tmp_path / "page.png"
    chromium(tmp_path, report.as_uri(), f"--screenshot={shot}", "--window-size=1100,1600")
    img = Image.open(shot)
    assert img.size == (1100, 1600)
    gray = img.convert("L")
    assert gray.getextrema()[0] < 60  # dark text is there
    assert colored_pixels(img) > 2000  # the verdict box and the first figure's curves


def test_every_figure_has_pixels(report, tmp_path):
    Image = pytest.importorskip("PIL.Image", reason="Pillow reads the screenshots (pip install pillow)")
    html = report.read_text()
    figures = re.findall(r"<figure id='fig-\d+' class='fig'>.*?</figure>", html, flags=re.S)
    # A control: axes, grid and a title but no data. The check must call it blank.
    figures.append("<figure><svg xmlns='http://www.w3.org/2000/svg' width='640' height='300'><rect width='640' height='300' "
                   "fill='#fff'/><line x1='64' x2='624' y1='256' y2='256' stroke='#555'/><text x='320' y='18'>empty</text>"
                   "</svg><figcaption>control</figcaption></figure>")
    cells = "".join(f"<div style='position:absolute;left:0;top:{i * CELL_H}px;width:{CELL_W}px;height:{CELL_H}px;overflow:hidden'>"
                    f"{fig}</div>" for i, fig in enumerate(figures))
    sheet = tmp_path / "sheet.html"
    sheet.write_text(f"<!DOCTYPE html><html><body style='margin:0;background:#fff'>{cells}</body></html>")
    shot = tmp_path / "sheet.png"
    chromium(tmp_path, sheet.as_uri(), f"--screenshot={shot}", f"--window-size={CELL_W},{CELL_H * len(figures)}")
    img = Image.open(shot)
    blank = []
    for i, fig in enumerate(figures):
        cell = img.crop((0, i * CELL_H, CELL_W, (i + 1) * CELL_H))
        if colored_pixels(cell) < 150:
            blank.append(re.search(r"<figcaption>(.*?)</figcaption>", fig).group(1))
    assert blank == ["control"], f"figures with no drawn data: {blank[:-1]}"
