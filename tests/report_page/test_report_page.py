"""The report page a person opens: failing cases first and linked, every axis titled in scientific
notation, plotly.js once (the page under 1 MiB for 100 cases), and the page drawn by a real Chromium
without a JavaScript error (CI installs Debian's chromium: see .ci/run)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("plotly")

from report_page_helpers import Page, browser, open_in_browser, report_of_100_cases  # noqa: E402


def _figures(text: str) -> list[tuple[list, dict]]:
    found = re.findall(r'Plotly\.newPlot\(\s*"[^"]+",\s*(\[.*?\]),\s*(\{.*?\}),\s*\{"responsive"', text, re.S)
    return [(json.loads(data), json.loads(layout)) for data, layout in found]


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    folder = tmp_path_factory.mktemp("page")
    (folder / "ds" / "reports").mkdir(parents=True)
    (folder / "ds" / "reports" / "replay.json").write_text(json.dumps(report_of_100_cases()))
    out = folder / "page" / "report.html"
    out.parent.mkdir()
    result = subprocess.run([sys.executable, "-m", "ikdata", "report", str(folder / "ds"), "--html", str(out),
                             "--json"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return out, json.loads(result.stdout)


def test_the_page_is_under_one_mib_with_plotly_once_beside_it(drawn):
    out, summary = drawn
    assert summary["cases"] == 100 and summary["failing"] == 5
    assert out.stat().st_size <= 1 << 20, out.stat().st_size
    page = Page()
    page.feed(out.read_text())
    library = out.parent / summary["plotly_js"].rsplit("/", 1)[-1]
    assert page.sources == [library.name] and library.stat().st_size > 1_000_000  # once, a local file
    assert not [s for s in page.scripts if len(s) > 1_000_000]  # not inlined as well


def test_self_contained_inlines_plotly_once(drawn, tmp_path):
    out, _ = drawn
    single = tmp_path / "single.html"
    result = subprocess.run([sys.executable, "-m", "ikdata", "report", str(out.parents[1] / "ds"), "--html",
                             str(single), "--self-contained"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    page = Page()
    page.feed(single.read_text())
    assert page.sources == [] and sum(len(s) > 1_000_000 for s in page.scripts) == 1
    assert not list(tmp_path.glob("plotly-*.js"))


def test_failing_cases_come_first_each_linked_to_its_chart(drawn):
    out, _ = drawn
    text = out.read_text()
    page = Page()
    page.feed(text)
    table = text[text.index("<h2 id='failing'>"):text.index("</table>", text.index("<h2 id='failing'>"))]
    assert "Failing cases (5)" in table
    assert text.index("id='failing'") < text.index("Plotly.newPlot")
    for uuid in ("01abababab", "op0007cccc", "op0037cccc", "op0067cccc", "err0dddddd"):
        assert uuid in table, uuid
    assert "worst e/f 500 at step 7 (video)" in table and "max_error_ratio 3.5 (C)" in table
    assert "the reference raised" in table and "no chart" in table  # an error without metrics has no chart
    links = re.findall(r"<a href='(#[^']*)'", table)  # the failing table's (the all-cases table links too)
    assert len(links) == 4 and all(h.startswith("#") and h[1:] in page.ids for h in links), (links, page.ids)
    assert set(links) <= {h for h in page.links if h}


def test_every_axis_is_titled_and_in_scientific_notation(drawn):
    out, _ = drawn
    figures = _figures(out.read_text())
    assert len(figures) >= 3 * 3 + 2  # per trajectory: 2 streams e/f, 2 chains, decode; operators; PIT
    for data, layout in figures:
        name = layout.get("title", {}).get("text", "")
        for axis in ("xaxis", "yaxis"):
            assert layout.get(axis, {}).get("title", {}).get("text"), (name, axis)
            assert layout[axis].get("exponentformat") == "e", (name, axis)
    chain = next(layout for _, layout in figures if "chain error" in layout["title"]["text"])
    assert chain["yaxis"]["title"]["text"] == "relative L2 error of x_next"


def test_the_operator_chart_is_one_row_per_definition_worst_on_top(drawn):
    out, _ = drawn
    data, layout = next(f for f in _figures(out.read_text()) if "max_error_ratio" in f[1]["title"]["text"])
    boxes = [t for t in data if t["type"] == "box"]
    assert len(boxes) == 23 and all(b["orientation"] == "h" for b in boxes)
    assert max(boxes[-1]["x"]) == 3.5  # plotly draws the last trace on top: the worst definition
    marked = next(t for t in data if t.get("name") == "past the tolerance")
    assert sorted(marked["x"]) == [3.5, 3.5, 3.5]
    assert layout["xaxis"]["type"] == "log"


@pytest.mark.skipif(browser() is None and not os.environ.get("IKDATA_REQUIRE_BROWSER"),
                    reason="no headless Chromium installed (apt-get install chromium; .ci/run installs it)")
def test_a_real_chromium_draws_every_chart_without_a_javascript_error(drawn, tmp_path):
    assert browser() is not None, "IKDATA_REQUIRE_BROWSER is set but no Chromium is installed"
    out, _ = drawn
    run = open_in_browser(out, tmp_path / "profile")
    dom = run.stdout
    assert "<body" in dom, run.stderr[-2000:]
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    assert not [line for line in console if "Uncaught" in line or "Error" in line], console
    charts = len(_figures(out.read_text()))
    assert dom.count('class="plot-container plotly"') == charts  # plotly.js (beside the page) ran for each
    assert dom.count('class="main-svg"') >= 2 * charts
    ids = set(re.findall(r'\sid="([^"]+)"', dom))
    links = re.findall(r'<a href="#([^"]+)"', dom)
    assert len(links) == 4 and set(links) <= ids
    assert "1e-12" in dom or "1e−12" in dom  # tick labels in scientific notation, not SI prefixes
    assert not re.search(r">\d+(\.\d+)?[pnµm]</text>", dom)
