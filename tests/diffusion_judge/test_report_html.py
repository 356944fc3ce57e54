"""``ikdata report DIR --html OUT``: a static page drawing e and f per step (log scale), the chain error, the
PSNR per frame, max_error_ratio per definition. Checked by parsing the file, and in a real headless browser
(Debian's chromium) when one is installed: plotly must have drawn its SVG plots."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from judge_helpers import replay

pytest.importorskip("plotly")
PIPELINE = f"{Path(__file__).parent / 'pipelines.py'}:ltx2"


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[str] = []
        self.divs: list[str] = []
        self.tables = 0
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script":
            self._in_script = True
            self.scripts.append("")
            if attrs.get("src"):
                self.scripts[-1] = f"SRC {attrs['src']}"
        if tag == "div" and attrs.get("id"):
            self.divs.append(attrs["id"])
        if tag == "table":
            self.tables += 1

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ikdata", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def drawn(reference_capture, tmp_path_factory):
    """A replay of the reference capture (decode check included) drawn by the CLI."""
    folder = tmp_path_factory.mktemp("report")
    root = folder / "ds"
    shutil.copytree(reference_capture, root)
    from test_decode_check import _encode, _engine_output

    video, _, _ = _engine_output(root)
    clip = _encode(folder / "clip.mkv", video, codec="ffv1", options={}, pix_fmt="bgr0")
    replay(root, folder, pipeline=PIPELINE, clips={"": str(clip)})
    (root / "reports").mkdir(exist_ok=True)
    shutil.copy(sorted(folder.glob("replay-*.json"))[-1], root / "reports" / "replay.json")
    out = folder / "r.html"
    result = _cli("report", str(root), "--html", str(out), "--json", "--self-contained")
    assert result.returncode == 0, result.stderr
    return out, json.loads(result.stdout)


def test_the_page_is_static_with_plotly_inlined_once(drawn):
    out, summary = drawn
    assert summary["trajectories"] == 1 and summary["html"] == str(out)
    page = _Page()
    page.feed(out.read_text())
    assert not [s for s in page.scripts if s.startswith("SRC ")]  # nothing fetched: opens offline
    assert sum("Plotly.newPlot" in s for s in page.scripts) >= 5
    assert sum(len(s) > 1_000_000 for s in page.scripts) == 1  # plotly.js itself, once
    # where the data came from, the per-trajectory summary, and the collapsible table of every case
    assert page.tables == 3


def test_the_page_draws_e_and_f_per_step_on_a_log_scale_chain_and_psnr(drawn):
    out, _ = drawn
    text = out.read_text()
    figures = [json.loads(m) for m in re.findall(r'Plotly\.newPlot\(\s*"[^"]+",\s*(\[.*?\]),\s*\{', text, re.S)]
    names = [[t.get("name") for t in traces] for traces in figures]
    for stream in ("video", "audio"):
        assert f"{stream}: e and f per step" in text
    ef = [n for n in names if n and n[0] == "e (engine vs reference)"]
    assert len(ef) == 2 and all(n[1].startswith("f (floor: sdpa vs sdpa-reversed)") and n[2].startswith("bound") for n in ef)
    assert sum(n == ["chain error", "chain bound"] for n in names) == 2
    assert ["PSNR per frame"] in names
    assert ["e (engine vs reference)"] not in names
    assert text.count('"type":"log"') >= 4
    assert "max_error_ratio per definition" in text  # the operator workloads of the capture


def test_a_report_that_is_not_one_is_exit_1_naming_it(tmp_path):
    bad = tmp_path / "r.json"
    bad.write_text('{"cases": 3}')
    result = _cli("report", str(bad), "--html", str(tmp_path / "o.html"))
    assert result.returncode == 1 and str(bad) in result.stderr and "not a replay report" in result.stderr
    assert not (tmp_path / "o.html").exists()


@pytest.mark.skipif(not (shutil.which("chromium") or shutil.which("chromium-browser")),
                    reason="no headless browser installed (apt-get install chromium)")
def test_a_real_headless_browser_renders_every_plot(drawn, tmp_path):
    out, _ = drawn
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    result = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                             f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", out.as_uri()],
                            capture_output=True, text=True, timeout=240)
    dom = result.stdout
    assert "<body" in dom, result.stderr[-2000:]
    drawn_plots = dom.count('class="main-svg"')  # plotly adds these SVGs only when its JavaScript ran
    assert drawn_plots >= 2 * 5, drawn_plots
    assert dom.count('class="plot-container plotly"') >= 5


def test_sampling_verdicts_draw_a_pit_histogram_and_operators_their_ratios():
    from ikdata.ops.report_html import render

    cases = [{"definition": "sampling_v8", "uuid": f"u{i}", "status": "passed",
              "tolerance": {"samples": {"judge": "sampling"}}, "metrics": {"samples": {}},
              "sampling": {"positions": 1, "judged": 1, "outside": 0, "pit": {"n": 10, "histogram": [1] * 10}}}
             for i in range(3)]
    cases += [{"definition": "gemm_a", "uuid": "g1", "status": "passed", "metrics": {"C": {"max_error_ratio": 0.25}}},
              {"definition": "gemm_a", "uuid": "g2", "status": "failed", "metrics": {"C": {"max_error_ratio": 3.0}}}]
    report = {"torch": "x", "device": "cpu", "tolerances": {}, "cases": cases,
              "sampling": [{"definition": "sampling_v8", "alpha": 0.01, "verdict": "passed",
                            "tests": [{"test": "pit", "n": 30, "p_value": 0.5, "alpha": 0.01, "null": "uniform",
                                       "too_small": False}]}]}
    page = render(report)
    figures = [json.loads(m) for m in re.findall(r'Plotly\.newPlot\(\s*"[^"]+",\s*(\[.*?\]),\s*\{', page, re.S)]
    pit = next(f for f in figures if f[0].get("name") == "PIT")
    assert pit[0]["y"] == [3] * 10  # summed over the definition's cases
    assert "sampling_v8: PIT histogram (30 draws), verdict passed" in page and "pit n=30 p=0.5" in page
    boxes = next(f for f in figures if f[0].get("type") == "box")
    assert boxes[0]["name"] == "gemm_a" and boxes[0]["x"] == [0.25, 3.0]  # horizontal: one row per definition
    assert "Diffusion trajectories" not in page  # nothing to draw there
