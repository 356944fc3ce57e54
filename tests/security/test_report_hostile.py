"""Finding 1 of issue 21: ``ikdata report DIR --html OUT`` draws a report that came with a dataset, so every
value of it is hostile. A script in any string field must not run when the page is opened (checked by
parsing the page, and in a real headless Chromium where one is installed), and a value of the wrong type (a
string where a number belongs, mixed step indexes) is a located problem, never a traceback."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

pytest.importorskip("plotly")

# Each would retitle the page to PWNED or mark the root element if it ran. The first is the finding's uuid.
PAYLOADS = (
    "'><script>/*",
    "<script>document.title='PWNED'</script>",
    "<img src=x onerror=\"document.documentElement.dataset.pwned=1\">",
    "*/document.title=`PWNED`//",
    "</title><svg onload=document.title=`PWNED`>",
    "\"><script>document.documentElement.dataset.pwned=1</script>",
)


def _hostile(i: int) -> str:
    return PAYLOADS[i % len(PAYLOADS)]


def hostile_report() -> dict:
    """A schema-valid replay report with a payload in every string field the page shows (numbers well typed)."""
    steps = [{"index": i, "stream": _hostile(s), "e": 0.01 * (i + 1), "f": 0.02, "bound": 0.1, "cos": 0.99,
              "chain": 0.001, "chain_bound": 0.01, "passed": i != 1}
             for s in range(2) for i in range(3)]
    trajectory = {
        "k": 4.0, "eps": 1e-3, "level": _hostile(2), "steps": steps, "steps_passed": _hostile(3),
        "steps_total": _hostile(4),
        "attention": {"reference": _hostile(1), "alt": _hostile(5)},
        "worst": {"ratio": 3.5, "step": _hostile(4), "stream": _hostile(0)},
        "first_failure": {"step": _hostile(1), "streams": [_hostile(2), _hostile(3)], "check": _hostile(5)},
        "decode": {"psnr_db": [40.0, 35.5], "psnr_mean_db": 37.7, "psnr_worst_db": 35.5, "worst_frame": 1,
                   "thresholds": {"psnr_mean_db": 30.0, "psnr_worst_db": 25.0}, "audio": {"snr_db": 20.0}},
    }
    cases = []
    for n, payload in enumerate(PAYLOADS):  # each payload once as the uuid, once in the pipeline name
        cases.append({"definition": "trajectory:" + _hostile(n + 3), "uuid": payload, "status": "failed",
                      "reason": _hostile(n + 1), "error": _hostile(n + 2), "trajectory": copy.deepcopy(trajectory)})
    for n, payload in enumerate(PAYLOADS):
        cases.append({"definition": payload, "uuid": _hostile(n + 1), "status": "passed",
                      "metrics": {_hostile(n + 2): {"max_error_ratio": 0.5 + n}}})
    sampling_definition = _hostile(1)
    cases.append({"definition": sampling_definition, "uuid": _hostile(2), "status": "passed",
                  "tolerance": {"samples": {"judge": _hostile(3)}}, "metrics": {"samples": {}},
                  "sampling": {"positions": 1, "judged": 1, "outside": 0, "pit": {"n": 10, "histogram": [1] * 10}}})
    tests = [{"test": "pit", "n": 10, "p_value": 0.5, "alpha": 0.01, "null": _hostile(4), "too_small": False,
              "histogram": [1] * 10},
             {"test": "tv", "n": 10, "p_value": 0.4, "alpha": 0.01, "null": _hostile(5), "too_small": False,
              "tv": 0.1, "threshold": 0.3, "key": _hostile(0), "detectable_tv": _hostile(2),
              "null_histogram": {"edges": [0.0, 0.1, 0.2], "counts": [5, 3]}}]
    return {"format": _hostile(0), "torch": _hostile(1), "device": _hostile(2), "ikdata_version": _hostile(3),
            "device_name": _hostile(4), "comparison": _hostile(5), "tolerances": {_hostile(0): _hostile(1)},
            "cases": cases,
            "sampling": [{"definition": sampling_definition, "alpha": 0.01, "verdict": "passed", "tests": tests}]}


def mistyped_report() -> dict:
    """The hostile report with strings (and lists, objects, booleans) where numbers belong, and mixed step
    indexes: each field is still schema-valid, so only the page's own type checks stand between it and a
    traceback."""
    report = hostile_report()
    t = report["cases"][0]["trajectory"]
    t["steps"][0]["e"] = "abc"
    t["steps"][1]["f"] = [1]
    t["steps"][2]["bound"] = {"a": 1}
    t["steps"][3]["chain"] = True
    t["steps"][4]["index"] = "4"  # mixed step index types in one stream
    t["steps"][5]["index"] = 2.5
    t["worst"]["ratio"] = "worse"
    t["decode"].update({"psnr_mean_db": "high", "psnr_worst_db": [], "psnr_db": ["a", 30.0], "worst_frame": "w",
                        "thresholds": {"psnr_mean_db": "q", "psnr_worst_db": None}, "audio": {"snr_db": "s"}})
    second = report["cases"][1]["trajectory"]
    second["steps"][0]["stream"] = 7
    second["first_failure"]["streams"] = 3
    second["decode"] = {"psnr_db": "frames", "psnr_mean_db": None}
    report["cases"][len(PAYLOADS)]["metrics"] = {"C": {"max_error_ratio": "big"}}
    tv = report["sampling"][0]["tests"][1]
    tv.update({"tv": "t", "threshold": "h", "null_histogram": {"edges": ["a", 0.1], "counts": ["b"]}})
    report["sampling"][0]["tests"][0]["histogram"] = ["c"] + [1] * 9
    report["cases"][-1]["sampling"]["pit"]["histogram"] = "d"
    return report


class _Page(HTMLParser):
    """Tags and attributes outside script bodies, and the scripts' text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[str] = []
        self.text: list[str] = []
        self._script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._script = True
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._script = False

    def handle_data(self, data):
        if self._script:
            self.scripts[-1] += data
        else:
            self.text.append(data)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ikdata", *args], capture_output=True, text=True, timeout=300)


def _dataset_with(tmp_path: Path, report: dict, name: str = "ds") -> Path:
    root = tmp_path / name
    (root / "reports").mkdir(parents=True)
    (root / "reports" / "replay.json").write_text(json.dumps(report))
    return root


def _assert_no_script_of_the_report(page: str) -> None:
    for payload in PAYLOADS:  # those that hold markup never appear raw (the others are harmless as text)
        assert "<" not in payload or payload not in page, payload
    parsed = _Page()
    parsed.feed(page)
    allowed = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "section", "table", "thead",
               "tbody", "tr", "th", "td", "div", "script", "ul", "li", "code", "a", "details", "summary"}
    assert {tag for tag, _ in parsed.tags} <= allowed
    for tag, attrs in parsed.tags:
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)
        assert set(attrs) <= {"charset", "class", "id", "type", "style", "href", "src", "open"}, (tag, attrs)
        assert all(value is None or "<" not in value and "'" not in value for value in attrs.values()), (tag, attrs)
        # links only to the page's own charts (ids are counters), the one script file plotly.js beside the page
        assert "href" not in attrs or tag == "a" and re.fullmatch(r"#[a-z]+(-[0-9]+(-[A-Za-z0-9-]*)?)?",
                                                                    attrs["href"]), (tag, attrs)
        assert "src" not in attrs or tag == "script" and re.fullmatch(r"plotly-[0-9.]+\.min\.js", attrs["src"]), \
            (tag, attrs)
    # the only scripts: plotly.js itself (once: inlined with its one-line config, or the file beside the page)
    # and one drawing call per figure
    sources = [attrs["src"] for tag, attrs in parsed.tags if tag == "script" and "src" in attrs]
    bundle = [s for s in parsed.scripts if len(s) > 1_000_000]
    config = [s for s in parsed.scripts if s.strip() == "window.PlotlyConfig = {MathJaxConfig: 'local'};"]
    calls = [s for s in parsed.scripts if len(s) <= 1_000_000 and s not in config and s.strip()]
    assert (len(bundle) == 1 and len(config) == 1 and not sources) or (len(sources) == 1 and not bundle), sources
    assert calls
    assert all(s.strip().startswith("window.PLOTLYENV") and "Plotly.newPlot" in s for s in calls), \
        [s[:80] for s in calls if not s.strip().startswith("window.PLOTLYENV")]
    shown = "".join(parsed.text)
    assert "'><script>/*" in shown  # the finding's uuid: shown as text
    assert "<script>document.title='PWNED'</script>" in shown


def test_hostile_strings_in_every_field_reach_the_page_as_text(tmp_path):
    root = _dataset_with(tmp_path, hostile_report(), name="x<svg onload=document.title=`PWNED`>")  # the title too
    out = tmp_path / "r.html"
    result = _cli("report", str(root), "--html", str(out))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    page = out.read_text()
    _assert_no_script_of_the_report(page)
    assert "<svg onload" not in page and "&lt;svg onload=document.title=`PWNED`&gt;" in page
    # the finding: the uuid was an id attribute and an <h3>; ids are now counters and a safe slug
    parsed = _Page()
    parsed.feed(page)
    ids = [attrs["id"] for tag, attrs in parsed.tags if tag == "section" and attrs.get("class") == "trajectory"]
    assert len(ids) == len(PAYLOADS) and len(set(ids)) == len(ids)
    assert all(i.replace("-", "").isalnum() for i in ids), ids


def test_plotly_text_shows_hostile_names_literally(tmp_path):
    """Titles, trace names and annotations: plotly reads a little HTML there, so names go in escaped."""
    from ikdata.ops.report_html import render

    page = render(hostile_report())
    assert "<img src=x" not in page.replace("\\u003c", "<").replace("\\u003e", ">")
    assert "&lt;img src=x onerror" in page.replace("\\u0026", "&")


def test_wrong_types_are_located_problems_not_tracebacks(tmp_path):
    root = _dataset_with(tmp_path, mistyped_report())
    out = tmp_path / "r.html"
    result = _cli("report", str(root), "--html", str(out), "--json")
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.returncode == 1, result.stderr
    source = str(root / "reports" / "replay.json")
    expected = ["/cases/0/trajectory/steps/0/e expected a number, found 'abc'",
                "/cases/0/trajectory/steps/1/f expected a number, found [1]",
                "/cases/0/trajectory/steps/3/chain expected a number, found True",
                "/cases/0/trajectory/steps/4/index expected an integer step index, found '4'",
                "/cases/0/trajectory/steps/5/index expected an integer step index, found 2.5",
                "/cases/0/trajectory/worst/ratio expected a number, found 'worse'",
                "/cases/0/trajectory/decode/psnr_mean_db expected a number, found 'high'",
                "/cases/0/trajectory/decode/psnr_db/0 expected a number, found 'a'",
                "/cases/1/trajectory/steps/0/stream expected a string, found 7",
                "/cases/1/trajectory/decode/psnr_db expected a list, found 'frames'",
                f"/cases/{len(PAYLOADS)}/metrics/C/max_error_ratio expected a number, found 'big'",
                "/sampling/0/tests/1/tv expected a number, found 't'",
                "/sampling/0/tests/0/histogram/0 expected a count"]
    for line in expected:
        assert f"{source}: {line}" in result.stderr, (line, result.stderr[-3000:])
    document = json.loads(result.stdout)
    assert document["html"] == str(out) and len(document["problems"]) >= len(expected)
    page = out.read_text()
    assert "not a number" in page and "value(s) of this report are not what the page expected" in page
    assert "/cases/0/trajectory/worst/ratio" in page
    _assert_no_script_of_the_report(page)


def test_render_of_a_report_no_schema_checked(tmp_path):
    """The library entry point draws anything JSON can hold without a traceback: numbers where strings
    belong, k and eps as strings, a case that is not an object, an integer too large for a float."""
    from ikdata.ops.report_html import draw

    report = mistyped_report()
    report["cases"][0]["trajectory"].update({"k": "four", "eps": None, "attention": "sdpa"})
    report["cases"][1]["uuid"] = 12345
    report["cases"][1]["definition"] = "trajectory:x"
    report["cases"][1]["trajectory"]["steps"][0]["e"] = 10 ** 400
    report["cases"].append("not a case")
    report["sampling"][0]["definition"] = ["a list"]
    page, problems = draw(report, path="r.json")
    pointers = {p.pointer for p in problems}
    assert {"/cases/0/trajectory/k", "/cases/0/trajectory/attention", f"/cases/{len(report['cases']) - 1}"} <= pointers
    assert all(str(p).startswith("r.json:") for p in problems)
    _assert_no_script_of_the_report(page)


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "chromium-headless", "headless_shell", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.mark.skipif(_browser() is None, reason="no headless Chromium installed (apt-get install chromium); "
                                               "the page is still checked by parsing it above")
@pytest.mark.parametrize("kind", ["hostile", "mistyped"])
def test_no_script_of_the_report_runs_in_a_real_browser(tmp_path, kind):
    """The page opened in headless Chromium: plotly's own scripts ran (its SVGs are there), the report's did
    not (the title is the page's, the root element carries no marker)."""
    report = hostile_report() if kind == "hostile" else mistyped_report()
    root = _dataset_with(tmp_path, report)
    out = tmp_path / "r.html"
    result = _cli("report", str(root), "--html", str(out))
    assert result.returncode == (0 if kind == "hostile" else 1), result.stderr
    run = subprocess.run([_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                          f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", out.as_uri()],
                         capture_output=True, text=True, timeout=240)
    dom = run.stdout
    assert "<body" in dom, run.stderr[-2000:]
    assert dom.count('class="main-svg"') >= 4  # plotly's JavaScript ran
    head = dom[:dom.index("<body")]
    assert f"<title>ikdata replay report: {root}</title>" in head, head[-500:]
    assert "PWNED" not in head
    assert "data-pwned" not in dom
