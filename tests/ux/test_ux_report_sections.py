"""Issue 39 finding 11, the report page: sampling sections right for greedy runs (no empty "verdict ... : " line,
no empty PIT chart of "0 draws"); no raw Python dict on the clip page; exact zeros drawn as zeros on a log axis
(a "0" tick one decade below the data, not 1e-12 twelve decades away); a collapsible table of every case on
every page, including one where everything passed."""

from __future__ import annotations

import math
import re

import pytest

pytest.importorskip("plotly")

from ikdata.diffusion.report_figures import trajectory_figures  # noqa: E402
from ikdata.ops.report_html import draw, operator_figure  # noqa: E402
from ikdata.sampling.report_figures import sampling_figures  # noqa: E402


def _greedy_report() -> dict:
    cases = [{"definition": "sampling_greedy_f32_v64", "uuid": f"g{i}" + "a" * 30, "status": "passed",
              "tolerance": {"samples": {"judge": "sampling"}}, "metrics": {"samples": {}},
              "sampling": {"positions": 4, "judged": 0, "greedy": 4, "outside": 0}} for i in range(3)]
    sampling = [{"definition": "sampling_greedy_f32_v64", "alpha": 0.001, "verdict": "passed",
                 "cases": {"passed": 3}, "tests": []}]
    return {"format": "ikdata-replay-report", "device": "cpu", "torch": "2.13.0", "ikdata_version": "0",
            "cases": cases, "sampling": sampling}


def _visible(page: str) -> str:
    """The page's text without its scripts and plotly's JSON."""
    return re.sub(r"<script.*?</script>", "", page, flags=re.S)


def test_a_greedy_run_says_why_no_test_ran_and_draws_no_empty_chart():
    [(definition, figure, line)] = sampling_figures(_greedy_report())
    assert definition == "sampling_greedy_f32_v64" and figure is None
    # no level is claimed where no statistical test ran (issue 51: "passed at alpha 0.001" beside "not judged")
    assert line == ("verdict passed with no statistical test: every one of the 12 draws was greedy: each was "
                    "checked to be the argmax, and no statistical test applies")
    page, problems = draw(_greedy_report())
    assert problems == []
    assert "0 draws" not in page and "PIT histogram" not in page and ": </p>" not in page
    assert "Nothing to draw" not in page and "every one of the 12 draws was greedy" in page


def test_a_sampling_group_with_nothing_judged_names_why():
    report = _greedy_report()
    for case in report["cases"]:
        case["sampling"].update(greedy=0)
    report["sampling"][0].update(verdict="too_small", not_judged=["every position excluded by top_k 1"])
    [(_, figure, line)] = sampling_figures(report)
    assert figure is None and line == ("verdict too_small with no statistical test: every position excluded by "
                                       "top_k 1")


def _trajectory(e0: float = 0.0) -> dict:
    steps = [{"index": i, "stream": "video", "e": e0 if i == 0 else 2e-7 * (i + 1), "f": 1e-6, "bound": 4e-6,
              "chain": 0.0 if i == 0 else 1e-7, "chain_bound": 1e-5, "passed": True} for i in range(6)]
    return {"definition": "trajectory:LTX2Pipeline", "uuid": "t0" + "b" * 30, "status": "passed",
            "trajectory": {"k": 4.0, "eps": 1e-9, "level": "step", "steps": steps, "steps_passed": 6,
                           "steps_total": 6, "attention": {"reference": "sdpa", "alt": "sdpa-reversed"},
                           "worst": {"ratio": 0.3, "step": 5, "stream": "video"},
                           "decode": {"psnr_db": [40.0, 41.0], "psnr_mean_db": 40.5, "psnr_worst_db": 40.0,
                                      "worst_frame": 0, "thresholds": {"psnr_mean_db": 25.0,
                                                                       "psnr_worst_db": 20.0}}}}


def test_the_clip_page_shows_no_python_dict():
    page, _ = draw({"cases": [_trajectory()], "device": "cpu"})
    text = _visible(page)
    assert "{'" not in text and "'reference'" not in text, text
    assert "floor f: sdpa vs sdpa-reversed" in text


def test_exact_zeros_sit_on_a_zero_tick_just_below_the_data():
    figures = dict(trajectory_figures(_trajectory()))
    for title in ("video: e and f per step", "video: chain error"):
        layout = figures[title].layout.yaxis
        assert layout.type == "log" and layout.ticktext[0] == "0"
        zero = layout.tickvals[0]
        smallest = min(v for t in figures[title].data for v in t.y if v and v > zero)
        assert zero == 10.0 ** math.floor(math.log10(smallest) - 1)  # one decade below the data, not 1e-12
        assert min(layout.tickvals) == zero and zero >= 1e-8
        assert all(y != 0 for t in figures[title].data for y in t.y if y is not None)
        texts = [x for t in figures[title].data for x in (t.text or ())]
        assert "0 (exact)" in texts
    assert "1e-12" not in figures["video: e and f per step"].layout.title.text
    cases = [{"definition": "gemm", "uuid": f"u{i}", "status": "passed",
              "metrics": {"C": {"max_error_ratio": ratio}}} for i, ratio in enumerate((0.0, 0.02, 0.5))]
    fig = operator_figure(cases)
    assert fig.layout.xaxis.ticktext[0] == "0" and fig.layout.xaxis.tickvals[0] == 1e-3
    assert sorted(fig.data[0].x) == [1e-3, 0.02, 0.5]


def test_a_chart_of_zeros_alone_is_linear():
    figures = dict(trajectory_figures(_trajectory()))
    assert figures["video: e and f per step"].layout.yaxis.type == "log"
    cases = [{"definition": "gemm", "uuid": "u0", "status": "passed", "metrics": {"C": {"max_error_ratio": 0.0}}}]
    fig = operator_figure(cases)
    assert fig.layout.xaxis.type == "linear" and list(fig.data[0].x) == [0.0]


def test_every_page_has_a_collapsible_table_of_every_case():
    passing = {"cases": [{"definition": "gemm", "uuid": f"{i:02d}" + "c" * 30, "status": "passed",
                          "metrics": {"C": {"max_error_ratio": 0.01 * (i + 1)}}} for i in range(4)], "device": "cpu"}
    page, _ = draw(passing)
    table = page[page.index("<details id='cases'>"):page.index("</details>")]
    assert "All cases (4)" in table and all(f"{i:02d}cccccccccc" in table for i in range(4))
    assert "max_error_ratio 0.04 (C)" in table and "<a class='chart' href='#operators'>" in table
    assert "id='failing'" not in page
    passing["cases"][2].update(status="failed", reason="C: past atol")
    page, _ = draw(passing)
    assert "<details id='cases' open>" in page and "id='failing'" in page
    greedy, _ = draw(_greedy_report())
    assert "All cases (3)" in greedy
